"""The helper that publishes a step's tokens while the engine thread decodes (engine/helperthread.py)."""

from __future__ import annotations

import threading

import pytest

from localrun.engine.helperthread import HelperThread


def test_jobs_run_on_the_helper_one_after_another_and_wait_sees_their_effects() -> None:
    helper = HelperThread("test-helper")
    seen: list[tuple[int, str]] = []
    try:
        for i in range(50):
            helper.start(lambda i=i: seen.append((i, threading.current_thread().name)))
            helper.wait()
            assert seen[-1] == (i, "test-helper")  # done before wait() returned
    finally:
        helper.close()


def test_a_job_that_raises_raises_in_wait_and_the_helper_goes_on() -> None:
    helper = HelperThread("test-helper")

    def broken() -> None:
        raise ValueError("bug in publishing")

    try:
        helper.start(broken)
        with pytest.raises(ValueError, match="bug in publishing"):
            helper.wait()
        done = threading.Event()
        helper.start(done.set)
        helper.wait()
        assert done.is_set()
    finally:
        helper.close()
    assert not helper._thread.is_alive()

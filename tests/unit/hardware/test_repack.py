"""Repacked weights only where a child process showed the CPU runs them, asked once per CPU model."""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

import pytest

from localrun.hardware import repack


def test_the_probe_runs_once_and_is_remembered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []

    def fake_probe(timeout: float = 0) -> tuple[bool, str]:
        calls.append(1)
        return False, "killed by signal 11"

    monkeypatch.setattr(repack, "probe", fake_probe)
    cache = tmp_path / "probes.json"
    assert repack.allowed(cache) is False
    assert repack.allowed(cache) is False
    assert calls == [1]
    assert repack.known(cache) == (False, "killed by signal 11")
    entry = json.loads(cache.read_text())[repack.cpu_key()]
    assert entry["repack"] is False and entry["probed_at"]


def test_another_cpu_is_asked_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "probes.json"
    cache.write_text(json.dumps({"Some Other CPU [x86_64 000000000000]": {"repack": False, "why": "x"}}))
    monkeypatch.setattr(repack, "probe", lambda timeout=0: (True, ""))
    assert repack.known(cache) == (None, "")
    assert repack.allowed(cache) is True
    assert len(json.loads(cache.read_text())) == 2


@pytest.mark.parametrize(("value", "expected"), [("0", False), ("off", False), ("1", True), ("yes", True)])
def test_localrun_repack_skips_the_probe(value: str, expected: bool, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCALRUN_REPACK", value)
    monkeypatch.setattr(repack, "probe", lambda timeout=0: pytest.fail("probed"))
    assert repack.allowed(tmp_path / "probes.json") is expected


def test_a_crashing_probe_means_no(monkeypatch: pytest.MonkeyPatch) -> None:
    def crash(*args: object, **kwargs: object) -> subprocess.CompletedProcess[bytes]:
        return subprocess.CompletedProcess([], -11, b"", b"loading...\n")

    monkeypatch.setattr(subprocess, "run", crash)
    ok, why = repack.probe()
    assert not ok and why.startswith("killed by signal 11")


def test_an_unwritable_cache_still_answers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(repack, "probe", lambda timeout=0: (True, ""))
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert repack.allowed(blocker / "sub" / "probes.json") is True


def test_the_real_probe_answers_here_and_leaves_nothing_behind(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """This machine's CPUs (AMD EPYC, Intel Xeon with or without usable AMX): the probe answers
    either way without hanging, and its model file goes even where the child died of the crash
    it probes for (an AMX Xeon kept 3.6 MB in /tmp for every probe before)."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    monkeypatch.setenv("TMPDIR", str(scratch))  # and the child's
    ok, why = repack.probe(timeout=60)
    assert ok or why
    assert list(scratch.iterdir()) == []


def test_the_probe_child_needs_its_directory() -> None:
    from localrun.hardware import repack_probe

    assert repack_probe.main([]) == 2
    assert repack_probe.main(["/nonexistent/localrun"]) == 2

"""LOCALRUN_RPC_SERVERS without an RPC build, or with a worker that is not there: a clear error, no crash."""

from __future__ import annotations

import pytest

from localrun.engine import rpc
from localrun.errors import EngineError


def test_no_workers_is_a_no_op() -> None:
    rpc.add_servers(())
    assert rpc.registered() == ()


def test_workers_without_an_rpc_build_say_how_to_get_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rpc, "supported", lambda: False)
    with pytest.raises(EngineError, match="GGML_RPC=on"):
        rpc.add_servers(("127.0.0.1:50052",))


def test_an_unreachable_worker_names_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rpc, "supported", lambda: True)
    with pytest.raises(EngineError, match=r"127\.0\.0\.1:1 is not reachable"):
        rpc.add_servers(("127.0.0.1:1",))
    assert rpc.registered() == ()

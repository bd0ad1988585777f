"""A hot model's requests skip the store thread while its files are unchanged (Service._resolved_now),
and what is kept for that is bounded by the models, not by how clients spell their names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from localrun.hardware.memory import read_geometry
from localrun.server.service import Service
from localrun.store import ModelStore


def test_a_hot_model_is_answered_without_the_store_thread_until_it_changes(tiny_gguf: Path, tmp_path: Path) -> None:
    store = ModelStore(tmp_path)
    store.create("tiny", f"FROM {tiny_gguf}\n")
    none: Any = None
    service = Service(store, none, none, num_parallel=1, geometry=read_geometry)
    resolved, _ = service._resolve("tiny")
    known = service._resolved_now("tiny")
    assert known is not None and known[0] is resolved
    for spelling in ["TINY", "Tiny:latest", "tINy"]:  # the store finds them case-insensitively
        assert service._resolve(spelling)[0].name == "tiny:latest"
    assert set(service._geometries) == {"tiny"}
    store.create("tiny", f"FROM {tiny_gguf}\nSYSTEM changed\n")
    assert service._resolved_now("tiny") is None  # re-created: the next request resolves again
    assert service._resolve("tiny")[0].system == "changed"

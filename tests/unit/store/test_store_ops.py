"""Random sequences of store operations keep the store sound: no missing layers, no orphan blobs, and
resolve's remembered answers (``resolve_unchanged``) never outlive a change."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from localrun.errors import ModelNotFound
from localrun.store import ModelName, ModelStore

NAMES = ["a", "b", "c:v1", "me/d"]
ops = st.lists(
    st.one_of(
        st.tuples(st.just("create"), st.sampled_from(NAMES), st.sampled_from(["x", "y", "z"])),
        st.tuples(st.just("derive"), st.sampled_from(NAMES), st.sampled_from(NAMES)),
        st.tuples(st.just("copy"), st.sampled_from(NAMES), st.sampled_from(NAMES)),
        st.tuples(st.just("remove"), st.sampled_from(NAMES), st.just("")),
    ),
    max_size=12,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops)
def test_store_stays_sound(tiny_gguf: Path, sequence: list[tuple[str, str, str]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = ModelStore(Path(tmp))
        oracle: dict[str, str | None] = {}  # display name -> system prompt
        for op, name, arg in sequence:
            shown = str(ModelName.parse(name))
            try:
                if op == "create":
                    store.create(name, f"FROM {tiny_gguf}\nSYSTEM {arg}\n")
                    oracle[shown] = arg
                elif op == "derive":
                    store.create(name, f"FROM {arg}\nPARAMETER top_k 5\n")
                    oracle[shown] = oracle[str(ModelName.parse(arg))]
                elif op == "copy":
                    store.copy(arg, name)
                    oracle[shown] = oracle[str(ModelName.parse(arg))]
                else:
                    store.remove(name)
                    del oracle[shown]
            except ModelNotFound:
                pass
            assert store.check_integrity() == []
            assert {e.name for e in store.list()} == set(oracle)
            for name in NAMES:  # resolve_unchanged answers only what resolve would answer now
                system = oracle.get(str(ModelName.parse(name)))
                known = store.resolve_unchanged(name)
                assert known is None or (system is not None and known.system == system)
                if system is not None:
                    assert store.resolve(name).system == system
        for shown, system in oracle.items():
            assert store.resolve(shown).system == system

"""Idle cached prefixes leave the KV cache for host RAM while requests run, and come back on a hit.

What a user notices: a conversation continued after other requests ran is still answered from the
cache (``cached_tokens``), with the same text, and the KV cache does not fill with idle prefixes
that would slow every decode step.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from engine_helpers import collect

from localrun.engine.engine import Engine
from localrun.engine.kvcache import RESIDENT_IDLE_CELLS
from localrun.engine.stepcost import StepCost
from localrun.engine.types import GenerateRequest, LoadOptions, PrefixCacheLocation, SamplingOptions

GREEDY = SamplingOptions(temperature=0, num_predict=16)
OPTIONS = LoadOptions(num_ctx=256, num_parallel=4, num_batch=64)
SYSTEM = [1] + [300 + (7 * i) % 400 for i in range(60)]
RESIDENT = 48  # idle cells the test lets the context keep (the default keeps none)


def prompt(i: int) -> list[int]:
    return SYSTEM + [310 + (13 * i + k) % 300 for k in range(40)]


def run(engine: Engine, i: int):  # type: ignore[no-untyped-def]
    return collect(engine.submit(GenerateRequest(prompt(i), GREEDY)))


def small_resident(engine: Engine) -> None:
    assert engine.batcher is not None
    engine.batcher.kv.resident_idle = RESIDENT


@pytest.mark.parametrize("resident", [RESIDENT, RESIDENT_IDLE_CELLS], ids=["some-resident", "default"])
def test_prefixes_moved_to_host_ram_answer_later_prompts_with_the_same_text(tiny_gguf: Path, resident: int) -> None:
    with Engine(str(tiny_gguf), OPTIONS) as engine:
        kv = engine.batcher.kv  # type: ignore[union-attr]
        kv.resident_idle = resident
        first = [run(engine, i) for i in range(6)]
        kv.check_cells()  # each eviction cut its owners' cells once, to exactly the path they keep
        assert kv.tree.evictable_size <= resident + len(prompt(0)) + 16  # at most the last one beyond the limit
        assert kv.host is not None and len(kv.host) > 0
        assert engine.stats().host_cache_bytes == kv.host.n_bytes > 0
        again = [run(engine, i) for i in range(6)]
        kv.check_integrity()
        kv.check_cells()
        assert kv.host.restored_tokens > 0  # and they count as prefix-cache hits
    for a, b in zip(first, again, strict=True):
        assert b.done.cached_tokens == len(prompt(0)) - 1
        assert b.text == a.text


def test_with_no_host_ram_idle_prefixes_stay_in_the_kv_cache(tiny_gguf: Path) -> None:
    options = LoadOptions(num_ctx=256, num_parallel=4, num_batch=64, prefix_cache_ram=0)
    with Engine(str(tiny_gguf), options) as engine:
        small_resident(engine)
        for i in range(4):
            run(engine, i)
        kv = engine.batcher.kv  # type: ignore[union-attr]
        assert kv.host is None and kv.tree.evictable_size >= 4 * 40
        assert run(engine, 0).done.cached_tokens == len(prompt(0)) - 1


def test_a_full_kv_cache_moves_prefixes_to_host_ram_instead_of_forgetting_them(tiny_gguf: Path) -> None:
    # 2 slots x 128 cells: five 100-token prompts with their answers (61 shared) do not fit together
    options = LoadOptions(num_ctx=128, num_parallel=2, num_batch=64)
    with Engine(str(tiny_gguf), options) as engine:
        first = [run(engine, i) for i in range(5)]
        kv = engine.batcher.kv  # type: ignore[union-attr]
        assert kv.host is not None and len(kv.host) > 0
        again = run(engine, 0)
        kv.check_integrity()
    assert again.done.cached_tokens == len(prompt(0)) - 1 and again.text == first[0].text


def test_saved_to_disk_with_the_host_tier_and_restored_across_a_reload(tiny_gguf: Path, tmp_path: Path) -> None:
    where = PrefixCacheLocation(str(tmp_path / "cache"), "sha256:tiny")
    with Engine(str(tiny_gguf), OPTIONS, prefix_cache=where) as engine:
        small_resident(engine)
        before = [run(engine, i) for i in range(5)]
        assert len(engine.batcher.kv.host or ()) > 0  # type: ignore[union-attr]
    with Engine(str(tiny_gguf), OPTIONS, prefix_cache=where) as engine:
        kv = engine.batcher.kv  # type: ignore[union-attr]
        kv.check_integrity()
        after = [run(engine, i) for i in range(5)]
        kv.check_integrity()
    for b, a in zip(before, after, strict=True):
        assert a.done.cached_tokens == len(prompt(0)) - 1
        assert a.text == b.text


def test_a_prefix_comes_back_only_after_idle_ones_left(tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """llama.cpp attends every cell up to the highest one in use: a conversation brought back from host RAM
    while a long idle prefix still held the low cells would sit above it for all its steps."""
    with Engine(str(tiny_gguf), OPTIONS) as engine:
        kv = engine.batcher.kv  # type: ignore[union-attr]
        run(engine, 0)
        run(engine, 1)  # while it ran, prompt 0's cells went to host RAM
        resident_at_restore: list[int] = []
        adopt = kv.adopt

        def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
            resident_at_restore.append(kv.tree.evictable_size)
            return adopt(*args, **kwargs)

        monkeypatch.setattr(kv, "adopt", spy)
        again = run(engine, 0)
        assert again.done.cached_tokens > len(SYSTEM)  # answered from host RAM
        assert resident_at_restore and resident_at_restore[0] == 0  # prompt 1's idle cells had left first


def test_idle_time_copies_take_the_move_to_host_ram_off_the_next_request(tiny_gguf: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """While the engine waits, the path a request leaves behind is copied out (its cells stay), so the next
    request's admission only frees cells. What host RAM holds, and every text, is as without the copies."""
    from localrun.engine import kvcache

    def session(copy_while_idle: bool) -> tuple[list[str], list[tuple[int, tuple[int, ...]]], list[int]]:
        order = [0, 1, 2, 3, 0, 4]
        copies_during: list[int] = []  # the request each copy made while a request ran belonged to
        with Engine(str(tiny_gguf), OPTIONS) as engine:
            kv = engine.batcher.kv  # type: ignore[union-attr]
            state_of = kvcache.state_of
            texts: list[str] = []

            def spy(ctx, seq_id, *more):  # type: ignore[no-untyped-def]
                if kv._active:
                    copies_during.append(len(texts))
                return state_of(ctx, seq_id, *more)

            monkeypatch.setattr(kvcache, "state_of", spy)
            if not copy_while_idle:
                monkeypatch.setattr(kv, "stage_idle", lambda interrupted: kv._staging.clear())
            for i in order:
                texts.append(run(engine, i).text)
                for _ in range(400):  # the copies are made once the engine has waited STAGE_AFTER
                    if not kv.staging_pending():
                        break
                    time.sleep(0.005)
            kv.check_integrity()
            held = sorted((seg.start, tuple(seg.path)) for seg in kv.host_segments())
        monkeypatch.undo()
        return texts, held, copies_during

    texts, held, during = session(copy_while_idle=True)
    without = session(copy_while_idle=False)
    assert (texts, held) == without[:2]
    # requests 2 and 3 start new branches beside an idle one: it moves out with no copy on their path, as
    # it did not without the idle-time copies (a node split after its copy, or the unused tail of a
    # segment brought back, is still copied when it moves)
    assert not {2, 3} & set(during) and {2, 3} <= set(without[2])
    assert len(during) < len(without[2])


def test_idle_time_copies_stay_inside_the_host_ram_budget(tiny_gguf: Path) -> None:
    """LOCALRUN_PREFIX_CACHE_RAM bounds the copies too: with room for about three segments, what host RAM
    holds plus the idle-time copies never goes over it, and every answer is still served."""
    with Engine(str(tiny_gguf), OPTIONS) as engine:
        kv = engine.batcher.kv  # type: ignore[union-attr]
        assert kv.host is not None
        run(engine, 0)
        segment = max(len(seg.state) for seg in kv.host_segments()) if len(kv.host) else 0
        kv.host.max_bytes = 3 * max(segment, 4096)
        for i in [1, 2, 3, 4, 0, 5]:
            assert run(engine, i).done.eval_count == 16
            for _ in range(400):
                if not kv.staging_pending():
                    break
                time.sleep(0.005)
            assert kv.host.n_bytes + kv._staged_bytes <= kv.host.max_bytes
        kv.check_integrity()


@pytest.mark.parametrize("token_seconds", [1e-9, 1.0], ids=["recompute-cheap", "recompute-dear"])
def test_a_short_last_segment_is_recomputed_where_that_is_cheaper_with_the_same_text(
        tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch, token_seconds: float) -> None:
    # prompts that share the system prompt and one more token of two kinds: the one-token node of
    # each kind goes to host RAM, and brings back only that token to the next prompt of its kind
    monkeypatch.setattr(StepCost, "prompt_token_seconds", lambda self, rows: token_seconds)
    prompts = [[*SYSTEM, 500 + i % 2, *prompt(i)[len(SYSTEM):]] for i in range(10)]
    with Engine(str(tiny_gguf), OPTIONS) as engine:
        kv = engine.batcher.kv  # type: ignore[union-attr]
        replies = [collect(engine.submit(GenerateRequest(p, GREEDY))) for p in prompts]
        # a repeat of one whose tail was stored after its one-token node: that node opens the way to
        # the rest of it, so it comes back
        repeat = collect(engine.submit(GenerateRequest(prompts[2], GREEDY)))
        assert repeat.done.cached_tokens == len(prompts[2]) - 1 and repeat.text == replies[2].text
        kv.check_integrity()
        kv.check_cells()
        assert kv.host is not None
        skipped = kv.host.skipped_tokens
    with Engine(str(tiny_gguf), LoadOptions(num_ctx=256, num_parallel=4, num_batch=64, prefix_cache_ram=0)) as plain:
        assert [r.text for r in replies] == [collect(plain.submit(GenerateRequest(p, GREEDY))).text for p in prompts]
    cached = [r.done.cached_tokens for r in replies[3:]]
    if token_seconds < 1e-6:  # each later prompt recomputes its one token rather than restore it
        assert skipped > 0 and set(cached) == {len(SYSTEM)}
    else:
        assert skipped == 0 and set(cached) == {len(SYSTEM) + 1}


def test_moves_sized_from_learned_sizes_hold_what_asked_sizes_hold(tiny_gguf: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A move to host RAM sizes its buffer from the sizes llama.cpp gave for earlier moves (seqstate.py,
    StateSizes) instead of asking again: the segments, and every text, are byte for byte the same."""
    import llama_cpp as lc

    from localrun.engine import seqstate

    def session(learn: bool) -> tuple[list[str], list[tuple[int, tuple[int, ...], bytes]], int]:
        asked = 0
        get_size = lc.llama_state_seq_get_size

        def counting(ctx, seq_id):  # type: ignore[no-untyped-def]
            nonlocal asked
            asked += 1
            return get_size(ctx, seq_id)

        monkeypatch.setattr(seqstate.lc, "llama_state_seq_get_size", counting)
        if not learn:
            monkeypatch.setattr(seqstate.StateSizes, "bound", lambda self, cells: None)
        with Engine(str(tiny_gguf), OPTIONS) as engine:
            texts = []
            for i in range(8):  # leaves of different lengths, moved out as the next request comes
                tail = [310 + (13 * i + k) % 300 for k in range(10 + 9 * i)]
                texts.append(collect(engine.submit(GenerateRequest(SYSTEM + tail, GREEDY))).text)
            kv = engine.batcher.kv  # type: ignore[union-attr]
            kv.check_integrity()
            held = sorted((seg.start, tuple(seg.path), bytes(seg.state)) for seg in kv.host_segments())
        monkeypatch.undo()
        return texts, held, asked

    texts, held, asked = session(learn=True)
    texts_asked, held_asked, asked_always = session(learn=False)
    assert (texts, held) == (texts_asked, held_asked) and len(held) >= 5
    assert asked <= 3 < asked_always  # two answers give the line, a third confirms it

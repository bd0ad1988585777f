"""Greedy sampling in llama.cpp's graph (engine/backend_sampler.py), forced on for the tiny model on a CPU:
the same text as the host's greedy pick, for every kind of request beside it, through preemption."""

from __future__ import annotations

from pathlib import Path

import pytest
from engine_helpers import collect

from localrun.engine.engine import Engine
from localrun.engine.types import DoneReason, GenerateRequest, LoadOptions, SamplingOptions


def words(n: int, offset: int = 0) -> list[int]:
    return [1] + [300 + (offset + 7 * i) % 400 for i in range(n)]


GREEDY_KINDS = [
    SamplingOptions(temperature=0, num_predict=40),                                   # penalties (1.1)
    SamplingOptions(temperature=0, num_predict=40, repeat_penalty=1.0),               # plain argmax
    SamplingOptions(temperature=0, num_predict=40, ignore_eos=True),                  # EOG masked
    SamplingOptions(temperature=0, num_predict=40, repeat_penalty=1.3, frequency_penalty=0.5,
                    presence_penalty=0.3, repeat_last_n=16),
]
# requests that must stay on the host path: sampled, logprobs, min_tokens
OTHERS = [
    SamplingOptions(temperature=0.8, seed=5, num_predict=30),
    SamplingOptions(temperature=0, num_predict=30, logprobs=True, top_logprobs=2),
    SamplingOptions(temperature=0, num_predict=30, min_tokens=20),
]


def run_all(path: Path, backend: bool) -> list[list[int]]:
    options = LoadOptions(num_ctx=256, num_parallel=4, num_batch=64, speculative=False, backend_sampling=backend)
    with Engine(str(path), options) as engine:
        assert (engine._backend is not None) is backend
        handles = [engine.submit(GenerateRequest(words(12 + i, 3 * i), options))
                   for i, options in enumerate(GREEDY_KINDS * 2 + OTHERS)]
        results = [collect(h) for h in handles]
        assert all(r.done.done_reason in (DoneReason.LENGTH, DoneReason.STOP) for r in results)
        return [r.generated for r in results]


def test_the_graph_picks_what_the_host_picks_beside_every_kind_of_request(tiny_gguf: Path) -> None:
    host = run_all(tiny_gguf, backend=False)
    graph = run_all(tiny_gguf, backend=True)
    assert graph == host


def test_requests_that_outgrow_the_pool_pause_and_resume_sampled_in_the_graph(tiny_gguf: Path) -> None:
    """Paused requests (admission.py) resume on whatever id is free, their chain rebuilt from the host's
    copy of the penalty window (the same replay that gives a new request its prompt's penalties, which
    the test above checks token for token). A resumed text may part from the unpaused one at a near-tie
    (test_engine_pool.py), so this checks that every request finishes whole."""
    options = LoadOptions(num_ctx=512, num_parallel=4, num_batch=64, context_pool=640, speculative=False,
                          backend_sampling=True)
    prompts = [[1] + [300 + (k + 11 * i) % 400 for i in range(60)] for k in range(3)]
    with Engine(str(tiny_gguf), options) as engine:
        handles = [engine.submit(GenerateRequest(p, SamplingOptions(temperature=0, num_predict=400, ignore_eos=True)))
                   for p in prompts]
        results = [collect(h) for h in handles]
        assert [(r.done.done_reason, r.done.eval_count) for r in results] == [(DoneReason.LENGTH, 400)] * 3
        assert engine.stats().preemptions > 0
        assert engine._backend is not None and engine._backend._chains
        engine.batcher.kv.check_integrity()  # type: ignore[union-attr]


def test_drafting_requests_stay_on_the_host(tiny_gguf: Path) -> None:
    """A greedy request that may draft has several output rows a step: llama.cpp's penalties cannot run
    in the graph then, so it gets no chain (and one drafting on an id takes that id's chain off)."""
    request = GenerateRequest(words(8) * 4, SamplingOptions(temperature=0, num_predict=48))
    texts = []
    for speculative in (False, True):
        options = LoadOptions(num_ctx=256, num_parallel=1, num_batch=64, speculative=speculative,
                              backend_sampling=True)
        with Engine(str(tiny_gguf), options) as engine:
            texts.append(collect(engine.submit(request)).generated)
            assert engine._backend is not None
            assert bool(engine._backend._chains) is not speculative
            texts.append(collect(engine.submit(request)).generated)
    assert texts[0] == texts[1] == texts[2] == texts[3]


@pytest.mark.parametrize("raw, expected", [(None, False), ("0", False), ("1", True), ("on", True)])
def test_the_setting_is_off_unless_set(raw: str | None, expected: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    from localrun import config
    if raw is None:
        monkeypatch.delenv("LOCALRUN_BACKEND_SAMPLING", raising=False)
    else:
        monkeypatch.setenv("LOCALRUN_BACKEND_SAMPLING", raw)
    assert config.backend_sampling() is expected
    assert config.load_settings().report()["LOCALRUN_BACKEND_SAMPLING"] == ("1" if expected else "0")


def test_one_id_passed_between_every_kind_of_request(tiny_gguf: Path) -> None:
    """One slot: each request takes over the id the last one left its chain on (kept, reset, replaced
    or taken off), and gets the text it gets on the host."""
    sequence = [GREEDY_KINDS[0], GREEDY_KINDS[0], OTHERS[1], GREEDY_KINDS[2], GREEDY_KINDS[3], OTHERS[0],
                GREEDY_KINDS[1], OTHERS[2], GREEDY_KINDS[0]]
    texts = {}
    for backend in (False, True):
        options = LoadOptions(num_ctx=256, num_parallel=1, num_batch=64, speculative=False, backend_sampling=backend)
        with Engine(str(tiny_gguf), options) as engine:
            texts[backend] = [collect(engine.submit(GenerateRequest(words(10 + i, i), o))).generated
                              for i, o in enumerate(sequence)]
    assert texts[True] == texts[False]

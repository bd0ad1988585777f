"""The engine on the tiny GGUF: batching, prefix cache, sampling, limits, errors, embeddings."""

from __future__ import annotations

import json
import math
import os
import threading
from pathlib import Path

import jsonschema
import pytest
from engine_helpers import collect

from localrun.engine import kvcache, native
from localrun.engine.batcher import SHARE_MIN
from localrun.engine.engine import Engine, kv_type
from localrun.engine.types import (
    DoneReason,
    GenerateRequest,
    LoadOptions,
    SamplingOptions,
    Truncation,
)
from localrun.errors import (
    ContextOverflow,
    EngineError,
    GrammarError,
    InvalidModelFile,
    InvalidRequest,
)

GREEDY = SamplingOptions(temperature=0, num_predict=24)


def words(n: int, offset: int = 0) -> list[int]:
    """A deterministic token-id prompt (BOS + n ordinary tokens)."""
    return [1] + [300 + (offset + 7 * i) % 400 for i in range(n)]


def test_generates_streams_and_reports(tiny_engine: Engine) -> None:
    result = collect(tiny_engine.submit(GenerateRequest("hello world", GREEDY)))
    done = result.done
    assert done.done_reason is DoneReason.LENGTH and done.eval_count == 24
    assert done.prompt_eval_count == len(tiny_engine.tokenize("hello world"))
    assert len(done.context) == done.prompt_eval_count + 24
    assert result.text == tiny_engine.detokenize(result.generated)
    assert done.prompt_eval_duration > 0 and done.eval_duration > 0


def test_concurrent_requests_beyond_the_slots_all_finish(tiny_engine: Engine) -> None:
    handles = [tiny_engine.submit(GenerateRequest(words(10 + i, i), SamplingOptions(seed=i, num_predict=30)))
               for i in range(10)]
    results = [collect(h) for h in handles]
    for r in results:  # random weights may sample the end-of-generation token early
        assert (r.done.done_reason, r.done.eval_count) == (DoneReason.LENGTH, 30) or (
            r.done.done_reason is DoneReason.STOP and r.done.eval_count < 30)
    assert tiny_engine.stats().slots_active == 0
    tiny_engine.batcher.kv.check_integrity()  # type: ignore[union-attr]


def test_same_seed_same_text_alone_and_alongside_others(tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The deterministic mode (batch_invariant): also alongside other requests."""
    # the engine sets it; later runner processes must not inherit it
    monkeypatch.delenv("GGML_CPU_TILED_MM", raising=False)
    options = LoadOptions(num_ctx=256, num_parallel=4, num_batch=64, batch_invariant=True)
    with Engine(str(tiny_gguf), options) as engine:
        request = GenerateRequest(words(20, 3), SamplingOptions(seed=1234, temperature=0.9, num_predict=40))
        alone = collect(engine.submit(request)).text
        others = [engine.submit(GenerateRequest(words(30 + i, 50 + i), SamplingOptions(num_predict=60)))
                  for i in range(3)]
        together = collect(engine.submit(request)).text
        for h in others:
            collect(h)
        assert together == alone
        other_seed = collect(engine.submit(GenerateRequest(words(20, 3), SamplingOptions(
            seed=99, temperature=0.9, num_predict=40)))).text
        assert other_seed != alone


def test_the_deterministic_mode_warns_when_layers_run_on_a_gpu(tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    """GPU kernels are outside the mode (packaging/README.md, numerics on a GPU): a load that puts layers
    there says so. No GPU here: llama.cpp's load report is the seam."""
    from localrun.engine import engine as engine_module
    from localrun.engine.load_report import LoadReport
    monkeypatch.delenv("GGML_CPU_TILED_MM", raising=False)
    gpu = LoadReport(layer_devices={0: "CPU", 1: "CUDA0", 2: "CUDA0"}, buffers={})
    monkeypatch.setattr(engine_module, "parse_load_report", lambda text: gpu)
    options = LoadOptions(num_ctx=256, num_parallel=1, num_batch=64, batch_invariant=True)
    with caplog.at_level("WARNING", logger="localrun.engine.engine"), Engine(str(tiny_gguf), options):
        pass
    assert "deterministic mode: 2 of 3 layers run on a GPU" in caplog.text
    caplog.clear()
    options = LoadOptions(num_ctx=256, num_parallel=1, num_batch=64)
    with caplog.at_level("WARNING", logger="localrun.engine.engine"), Engine(str(tiny_gguf), options):
        pass
    assert "deterministic mode" not in caplog.text


def test_same_seed_same_text_when_repeated_alone_with_the_fast_kernels(tiny_gguf: Path) -> None:
    """The default mode: the last prompt token in a step of its own and a placeholder beside a lone decode
    make a repeat, whose prompt comes from the prefix cache, compute exactly what the first run did."""
    request = GenerateRequest(words(40, 5), SamplingOptions(seed=77, temperature=0.9, num_predict=60, logprobs=True))
    with Engine(str(tiny_gguf), LoadOptions(num_ctx=512, num_parallel=4, num_batch=64)) as engine:
        for i in range(3):  # other prompts in the cache first, so the repeats' cells are not at its start
            collect(engine.submit(GenerateRequest(words(200, 50 + i), SamplingOptions(seed=i, num_predict=40))))
        runs = [collect(engine.submit(request)) for _ in range(4)]
    assert runs[1].done.cached_tokens == runs[1].done.prompt_eval_count - 1  # repeats come from the prefix cache
    assert all(r.text == runs[0].text and r.generated == runs[0].generated for r in runs)


def test_prefix_cache_hit_gives_the_same_greedy_output(tiny_gguf: Path) -> None:
    prefix = words(128, 11)  # two num_batch chunks: the same chunking with and without the cache
    first, second = [*prefix, 400, 401, 402], [*prefix, 500, 501, 502, 503]
    with Engine(str(tiny_gguf), LoadOptions(num_ctx=512, num_parallel=2, num_batch=64)) as engine:
        collect(engine.submit(GenerateRequest(first, GREEDY)))
        hit = collect(engine.submit(GenerateRequest(second, GREEDY)))
        engine.batcher.kv.check_integrity()  # type: ignore[union-attr]
    with Engine(str(tiny_gguf), LoadOptions(num_ctx=512, num_parallel=2, num_batch=64)) as fresh:
        cold = collect(fresh.submit(GenerateRequest(second, GREEDY)))
    assert hit.done.cached_tokens == len(prefix) and cold.done.cached_tokens == 0
    assert hit.generated == cold.generated


def test_finished_sequences_stay_cached_until_memory_is_needed(tiny_gguf: Path) -> None:
    with Engine(str(tiny_gguf), LoadOptions(num_ctx=128, num_parallel=2, num_batch=64)) as engine:
        kv = engine.batcher.kv  # type: ignore[union-attr]
        collect(engine.submit(GenerateRequest(words(60, 1), GREEDY)))
        assert kv.cached_cells >= 60
        again = collect(engine.submit(GenerateRequest(words(60, 1), GREEDY)))
        assert again.done.cached_tokens == 60  # all but the last prompt token
        for i in range(12):  # many distinct prompts: 256 cells force LRU eviction
            collect(engine.submit(GenerateRequest(words(60, 100 + i), GREEDY)))
            kv.check_integrity()
            assert engine.stats().kv_cells_used <= engine.stats().kv_cells_total
        assert collect(engine.submit(GenerateRequest(words(60, 1), GREEDY))).generated == again.generated


def test_shared_prefix_is_computed_once_for_concurrent_requests(tiny_gguf: Path) -> None:
    prefix = words(200, 5)
    with Engine(str(tiny_gguf), LoadOptions(num_ctx=512, num_parallel=4, num_batch=64)) as engine:
        handles = [engine.submit(GenerateRequest([*prefix, 600 + i, 610 + i], GREEDY)) for i in range(4)]
        results = [collect(h) for h in handles]
        engine.batcher.kv.check_integrity()  # type: ignore[union-attr]
        stats = engine.stats()
    followers = sorted(r.done.cached_tokens for r in results)[1:]
    assert all(c >= 200 - SHARE_MIN for c in followers)  # waited for the first prefill, not recomputed
    assert stats.prefix_cache_hit_tokens == sum(followers)


def test_cache_falls_back_to_recomputing_when_partial_removal_is_refused(
        tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_rm = kvcache.lc.llama_memory_seq_rm

    def refuse_partial(mem, seq, p0, p1):  # type: ignore[no-untyped-def]
        return real_rm(mem, seq, p0, p1) if (p0, p1) == (-1, -1) else False

    monkeypatch.setattr(kvcache.lc, "llama_memory_seq_rm", refuse_partial)
    prompt = words(100, 2)
    with Engine(str(tiny_gguf), LoadOptions(num_ctx=512, num_parallel=2, num_batch=64)) as engine:
        first = collect(engine.submit(GenerateRequest(prompt, GREEDY)))
        second = collect(engine.submit(GenerateRequest(prompt, GREEDY)))
        assert not engine.batcher.kv.enabled  # type: ignore[union-attr]
        third = collect(engine.submit(GenerateRequest(prompt, GREEDY)))
    assert first.generated == second.generated == third.generated
    assert third.done.cached_tokens == 0


def test_cancel_ends_with_cancelled_and_frees_the_slot(tiny_engine: Engine) -> None:
    # ignore_eos: random weights may otherwise sample the end-of-generation token before the cancel lands
    handle = tiny_engine.submit(GenerateRequest(words(8), SamplingOptions(num_predict=None, ignore_eos=True)))
    first = handle.get(timeout=60)
    assert first is not None
    handle.cancel()
    result = collect(handle)
    assert result.done.done_reason is DoneReason.CANCELLED
    assert collect(tiny_engine.submit(GenerateRequest(words(8), GREEDY))).done.eval_count == 24
    assert tiny_engine.stats().slots_active == 0


def test_generation_stops_at_the_context_limit(tiny_engine: Engine) -> None:
    result = collect(tiny_engine.submit(GenerateRequest(words(200), SamplingOptions(temperature=0))))
    assert result.done.done_reason is DoneReason.LENGTH
    assert len(result.done.context) == tiny_engine.info.num_ctx == 256


def test_long_prompt_is_truncated_from_the_front_keeping_num_keep(tiny_engine: Engine) -> None:
    prompt = words(400)
    result = collect(tiny_engine.submit(GenerateRequest(prompt, GreedyShort(), num_keep=10)))
    done = result.done
    assert done.truncated_tokens == len(prompt) - done.prompt_eval_count > 0
    kept = list(done.context[: done.prompt_eval_count])
    assert kept[:10] == prompt[:10] and kept[10:] == prompt[len(prompt) - (len(kept) - 10):]
    with pytest.raises(ContextOverflow):
        tiny_engine.submit(GenerateRequest(prompt, GREEDY, truncation=Truncation.REJECT))


def GreedyShort() -> SamplingOptions:
    return SamplingOptions(temperature=0, num_predict=8)


@pytest.mark.parametrize(
    ("request_", "error"),
    [
        (GenerateRequest(""), InvalidRequest),
        (GenerateRequest("   "), InvalidRequest),
        (GenerateRequest([]), InvalidRequest),
        (GenerateRequest([1, 10**7]), InvalidRequest),
        # options out of range are the server's 400 (tests/unit/server); the engine only asserts them
        (GenerateRequest("hi", SamplingOptions(top_p=2.0)), AssertionError),
        (GenerateRequest("hi", SamplingOptions(temperature=-1)), AssertionError),
        (GenerateRequest("hi", format={"type": "integer", "minimum": 1}), GrammarError),
        (GenerateRequest("hi", grammar="root ::= ???"), GrammarError),
    ],
)
def test_bad_requests_get_clear_errors(tiny_engine: Engine, request_: GenerateRequest, error: type) -> None:
    with pytest.raises(error):
        tiny_engine.submit(request_)
    assert collect(tiny_engine.submit(GenerateRequest("still fine", GreedyShort()))).done.eval_count == 8


def test_bad_load_options_and_files(tiny_gguf: Path, tmp_path: Path) -> None:
    with pytest.raises(AssertionError):  # the server never asks for these (merge_options, slot sizing)
        Engine(str(tiny_gguf), LoadOptions(num_ctx=-5))
    with pytest.raises(AssertionError):
        Engine(str(tiny_gguf), LoadOptions(num_parallel=0))
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a model")
    with pytest.raises(InvalidModelFile):
        Engine(str(junk), LoadOptions())
    truncated = tmp_path / "cut.gguf"
    truncated.write_bytes(tiny_gguf.read_bytes()[:5000])
    with pytest.raises(InvalidModelFile):
        Engine(str(truncated), LoadOptions())


SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer"},
        "ok": {"type": "boolean"},
        "kind": {"enum": ["cat", "dog"]},
    },
    "required": ["name", "age", "ok", "kind"],
}


def test_json_schema_output_validates_even_with_random_weights(tiny_engine: Engine) -> None:
    for seed in range(3):
        options = SamplingOptions(temperature=1.0, seed=seed, num_predict=200)
        result = collect(tiny_engine.submit(GenerateRequest("give me json", options, format=SCHEMA)))
        assert result.done.done_reason is DoneReason.STOP
        jsonschema.validate(json.loads(result.text), SCHEMA)


def test_logprobs_are_reported_per_token(tiny_engine: Engine) -> None:
    options = SamplingOptions(temperature=0, repeat_penalty=1.0, num_predict=6, logprobs=True, top_logprobs=3)
    result = collect(tiny_engine.submit(GenerateRequest("hello", options)))
    logprobs = [lp for event in result.tokens for lp in event.logprobs]
    assert len(logprobs) == 6
    for lp in logprobs:
        assert lp.logprob <= 0 and len(lp.top) == 3
        assert math.isclose(lp.top[0][1], lp.logprob, abs_tol=1e-4)  # greedy picks the best


def test_stop_strings_end_generation(tiny_engine: Engine) -> None:
    reference = collect(tiny_engine.submit(GenerateRequest(words(12, 9),
                                                           SamplingOptions(temperature=0, num_predict=40))))
    text = reference.text
    stop = text[len(text) // 2: len(text) // 2 + 3]
    cut = text.find(stop)
    stopped = collect(tiny_engine.submit(GenerateRequest(words(12, 9), SamplingOptions(
        temperature=0, num_predict=40, stop=(stop,)))))
    assert stopped.text == text[:cut]
    assert stopped.done.done_reason is DoneReason.STOP


@pytest.mark.parametrize("beside", [0, 3])
def test_a_stop_string_found_while_the_next_step_decodes_ends_the_reply_as_if_it_had_not(
        tiny_engine: Engine, beside: int) -> None:
    """The stop string of a step's token shows only while the next step decodes (batcher.py): that
    sequence decodes one token too many. Its text, its counts, its context and its cells must be those
    of a reply that ended at the stop, alone or beside other streams, and its cached prefix serves a
    follow-up."""
    prompt = words(12, 9)
    reference = collect(tiny_engine.submit(GenerateRequest(prompt, SamplingOptions(temperature=0, num_predict=40))))
    text, generated = reference.text, reference.generated
    stop = text[len(text) // 2: len(text) // 2 + 3]
    completing = next(n for n in range(1, len(generated) + 1) if stop in tiny_engine.detokenize(generated[:n]))
    others = [tiny_engine.submit(GenerateRequest(words(20 + i, i), SamplingOptions(temperature=0, num_predict=60)))
              for i in range(beside)]
    stopped = collect(tiny_engine.submit(GenerateRequest(prompt, SamplingOptions(
        temperature=0, num_predict=40, stop=(stop,)))))
    for handle in others:
        collect(handle)
    assert stopped.text == text[: text.find(stop)]
    assert stopped.done.done_reason is DoneReason.STOP
    assert stopped.done.eval_count == completing
    assert list(stopped.done.context) == prompt + generated[:completing]
    kv = tiny_engine.batcher.kv  # type: ignore[union-attr]
    kv.check_integrity()
    assert tiny_engine.stats().kv_cells_used == kv.cached_cells  # the extra token's cell went with the tail
    follow = collect(tiny_engine.submit(GenerateRequest([*stopped.done.context, 300, 301],
                                                        SamplingOptions(temperature=0, num_predict=2))))
    assert follow.done.cached_tokens >= len(prompt) + completing - 1


def test_embeddings_batch_normalised_and_truncation_reported(tiny_engine: Engine) -> None:
    result = tiny_engine.embed(["hello world", "the model", "hello world"])
    assert len(result.embeddings) == 3 and result.truncated == [False] * 3
    for vec in result.embeddings:
        assert len(vec) == tiny_engine.info.n_embd
        assert math.isclose(sum(v * v for v in vec), 1.0, rel_tol=1e-5)
    assert result.embeddings[0] == pytest.approx(result.embeddings[2], abs=1e-5)
    alone = tiny_engine.embed(["the model"]).embeddings[0]
    assert alone == pytest.approx(result.embeddings[1], abs=1e-4)
    long_text = "hello world " * 400
    cut = tiny_engine.embed([long_text, "short"], truncate=True)
    assert cut.truncated == [True, False]
    with pytest.raises(ContextOverflow):
        tiny_engine.embed([long_text], truncate=False)
    with pytest.raises(InvalidRequest):
        tiny_engine.embed([])


def test_calls_from_many_threads_and_close(tiny_gguf: Path) -> None:
    engine = Engine(str(tiny_gguf), LoadOptions(num_ctx=256, num_parallel=2, num_batch=32))
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            collect(engine.submit(GenerateRequest(words(5, i), SamplingOptions(num_predict=10))))
            engine.embed([f"text {i}"])
            engine.stats()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    pending = engine.submit(GenerateRequest(words(5), SamplingOptions(num_predict=None)))
    engine.close()
    engine.close()  # idempotent
    events = list(pending)
    assert events  # the stream ends (done or error) instead of hanging
    with pytest.raises(EngineError):
        engine.submit(GenerateRequest("after close"))


@pytest.mark.parametrize(
    "options",
    [
        LoadOptions(num_ctx=16, num_parallel=8),
        LoadOptions(num_ctx=16, num_parallel=1, num_batch=1),
        LoadOptions(num_ctx=64, num_parallel=4, num_batch=8),  # batch below the sequence count
    ],
)
def test_tiny_contexts_and_batches_do_not_abort_the_process(tiny_gguf: Path, options: LoadOptions) -> None:
    with Engine(str(tiny_gguf), options) as engine:
        handles = [engine.submit(GenerateRequest("hello world the model", SamplingOptions(num_predict=40)))
                   for _ in range(6)]
        assert all(collect(h).done.done_reason in (DoneReason.LENGTH, DoneReason.STOP) for h in handles)
        embedded = engine.embed(["hello world"] * 40 + ["the model " * 80])
        assert len(embedded.embeddings) == 41 and embedded.truncated[-1]


@pytest.mark.parametrize("num_batch", [1, 10**9])
def test_an_extreme_num_batch_is_clamped_by_the_engine_itself(tiny_gguf: Path, num_batch: int) -> None:
    """Not only the daemon clamps it: a library user gets a working engine, not an abort or a MemoryError."""
    with Engine(str(tiny_gguf), LoadOptions(num_ctx=128, num_parallel=2, num_batch=num_batch)) as engine:
        result = collect(engine.submit(GenerateRequest(words(40), GREEDY)))
        assert result.done.eval_count > 0


@pytest.mark.parametrize(("invariant", "expected"), [(True, "bf16"), (False, "f16")])
def test_auto_kv_cache_follows_batch_invariance_on_cpu(invariant: bool, expected: str) -> None:
    assert kv_type(LoadOptions(num_gpu=0, batch_invariant=invariant)) == expected
    assert kv_type(LoadOptions(num_gpu=0, batch_invariant=invariant, kv_cache_type="f16")) == "f16"  # explicit wins


def test_the_default_is_the_fast_kernels_and_an_f16_cache() -> None:
    assert not LoadOptions().batch_invariant and kv_type(LoadOptions(num_gpu=0)) == "f16"


def test_batch_invariant_matmuls_keep_a_value_the_user_exported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GGML_CPU_TILED_MM", raising=False)
    native.use_batch_invariant_matmuls()
    assert os.environ["GGML_CPU_TILED_MM"] == "0"
    monkeypatch.setenv("GGML_CPU_TILED_MM", "1")
    native.use_batch_invariant_matmuls()
    assert os.environ["GGML_CPU_TILED_MM"] == "1"


@pytest.mark.parametrize("kv", ["f16", "bf16"])
def test_both_kv_cache_types_load_and_generate(tiny_gguf: Path, kv: str) -> None:
    with Engine(str(tiny_gguf), LoadOptions(num_ctx=128, num_parallel=2, num_batch=64, kv_cache_type=kv)) as engine:
        assert collect(engine.submit(GenerateRequest(words(40), GREEDY))).done.eval_count > 0


def test_an_interactive_request_is_admitted_before_queued_batch_work(tiny_gguf: Path) -> None:
    """Two slots busy with long batch jobs and three more queued: a chat turn arriving last gets a
    slot as soon as one frees, before the batch jobs queued ahead of it."""
    with Engine(str(tiny_gguf), LoadOptions(num_ctx=512, num_parallel=2, num_batch=64)) as engine:
        long = SamplingOptions(temperature=0, num_predict=120, ignore_eos=True, logprobs=True)  # an event per token
        batch = [engine.submit(GenerateRequest(words(300, i), long, interactive=False)) for i in range(5)]
        assert batch[0].get(timeout=60) is not None  # the first two jobs hold both slots, three wait
        chat = engine.submit(GenerateRequest(words(10, 99), SamplingOptions(temperature=0, num_predict=4,
                                                                           ignore_eos=True), interactive=True))
        assert collect(chat).done.eval_count == 4
        started = [h.get(timeout=0) is not None for h in batch[1:]]  # any event yet = admitted
        for h in batch:
            h.cancel()
    # besides the two running jobs, at most one admitted beside the chat turn had both slots freed at once
    assert started[0] and sum(started[1:]) <= 1




@pytest.mark.parametrize(("repeat", "freq", "present"), [(1.1, 0.0, 0.0), (1.5, 0.5, 0.3), (0.9, -0.5, -0.3)])
def test_fast_greedy_picks_what_llama_cpps_chain_picks(repeat: float, freq: float, present: float) -> None:
    """GreedyPenalties against the real chain (top_k(k + last_n) -> penalties -> greedy) on random rows."""
    import llama_cpp as lc
    import numpy as np

    from localrun.engine.greedy import GreedyPenalties
    from localrun.engine.sampling import TokenData

    n_vocab, last_n = 5000, 64
    rng = np.random.default_rng(7)
    scratch = TokenData(n_vocab)
    params = lc.llama_sampler_chain_default_params()
    chain = lc.llama_sampler_chain_init(params)
    if repeat >= 1 and freq >= 0 and present >= 0:
        lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_top_k(1 + last_n))
    lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_penalties(n_vocab, last_n, repeat, freq, present))
    lc.llama_sampler_chain_add(chain, lc.llama_sampler_init_greedy())
    fast = GreedyPenalties(last_n, repeat, freq, present)
    try:
        for step in range(300):
            row = rng.normal(0, 3, n_vocab).astype(np.float32)
            row[rng.integers(0, 40, 20)] += 6  # a few favourite tokens, so the history bites
            scratch.fill(row)
            lc.llama_sampler_apply(chain, scratch.ref)
            native = int(scratch.data["id"][scratch.array.selected])
            assert fast.pick(row) == native, step
            lc.llama_sampler_accept(chain, native)
            fast.accept(native)
    finally:
        lc.llama_sampler_free(chain)


@pytest.mark.parametrize(("use_mmap", "buffer"), [(True, "CPU_Mapped"), (False, "CPU")])
def test_use_mmap_false_reads_the_weights_into_memory(tiny_gguf: Path, use_mmap: bool, buffer: str) -> None:
    """Ollama's use_mmap option reaches llama.cpp (its load_mode; the old use_mmap field is gone)."""
    with Engine(str(tiny_gguf), LoadOptions(num_ctx=64, num_parallel=1, num_batch=64, use_mmap=use_mmap)) as engine:
        assert buffer in engine.info.buffer_bytes, engine.info.buffer_bytes
        assert ("CPU_Mapped" in engine.info.buffer_bytes) is use_mmap


def test_a_lone_client_stops_paying_the_burst_wait_and_a_burst_brings_it_back(tiny_engine: Engine) -> None:
    """One request at a time (a chat, an agent): after LONE_BEFORE_SKIP of them the idle engine starts the
    next at once instead of waiting 4 ms for companions; requests arriving together turn the wait back on."""
    from localrun.engine.engine import LONE_BEFORE_SKIP

    for i in range(LONE_BEFORE_SKIP + 1):
        collect(tiny_engine.submit(GenerateRequest(words(8, i), GREEDY)))
    assert tiny_engine._lone_arrivals >= LONE_BEFORE_SKIP
    with tiny_engine._cond:  # the four arrive together (the condition's lock is re-entrant: submit takes it too)
        handles = [tiny_engine.submit(GenerateRequest(words(40, 50 + i), SamplingOptions(temperature=0, num_predict=8)))
                   for i in range(4)]
    assert all(collect(h).done.eval_count > 0 for h in handles)
    assert tiny_engine._lone_arrivals == 0

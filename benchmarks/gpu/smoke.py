"""GPU smoke run of localrun's engine on the tiny GGUF: speculative vs plain greedy decoding.

Usage: python .gpu/smoke.py [--num-gpu N] [--cpu-compare] [--rounds R]
  --num-gpu: layers to offload (default 99 when llama.cpp supports GPU offload, else 0)
  --cpu-compare: also run a CPU-only plain engine and report (never fail on) differences

Two engines (speculative=False / True), the same requests in the same order to both. Workloads:
  ngram/*  the real n-gram drafter (engine/drafter.py); the random-weight model hardly repeats
           itself, so it drafts little and few drafts are confirmed
  oracle/* batcher.NgramDrafter swapped for an oracle that drafts the plain engine's own greedy
           continuation, every second guess spoilt (as tests/integration/engine/test_engine_speculative.py
           does): drafts confirmed whole, cut short and rejected
"4 at once" workloads submit four requests together; "alone" ones one after another.

A difference between spec and plain token ids is judged only without penalties (the logprobs
are of raw logits): allowed where plain's two best tokens were within NEAR_TIE nats (other
rows/cells in the batch can round a near-tie the other way), a failure otherwise. With
penalties, differences are reported, not judged. Exit 1 on a failure, on no confirmed draft at
all, or gpu_layers == 0 when a GPU was expected. JSON summary in $OUT/smoke.json when OUT is set.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "integration" / "engine")]

import llama_cpp as lc  # noqa: E402
from engine_helpers import Result, collect  # noqa: E402
from tinymodel import write_tiny_gguf  # noqa: E402

from localrun.engine import batcher  # noqa: E402
from localrun.engine.engine import Engine  # noqa: E402
from localrun.engine.types import GenerateRequest, LoadOptions, SamplingOptions  # noqa: E402

NEAR_TIE = 0.02  # nats, as test_engine_speculative.same_until_a_near_tie


class OracleDrafter:
    """Drafts the known greedy continuation; every second guess is spoilt at its first or second token."""

    references: list[list[int]] = []
    calls = 0

    def propose(self, tokens: list[int], k: int) -> list[int]:
        for ref in self.references:
            if len(ref) > len(tokens) and ref[: len(tokens)] == tokens:
                draft = ref[len(tokens): len(tokens) + k]
                OracleDrafter.calls += 1
                spoil = (0, None, 1, None)[OracleDrafter.calls % 4]
                if draft and spoil is not None and spoil < len(draft):
                    draft[spoil] = (draft[spoil] + 1) % 300 + 300
                return draft
        return []


REAL_DRAFTER = batcher.NgramDrafter


def prompt(n: int, offset: int) -> list[int]:
    return [1] + [300 + (offset + 7 * i) % 400 for i in range(n)]


def four(sampling: SamplingOptions) -> list[GenerateRequest]:
    return [GenerateRequest(prompt(20 + 3 * i, 11 * i), sampling) for i in range(4)]


NOPEN = SamplingOptions(temperature=0, num_predict=96, repeat_penalty=1.0)
DEFAULT = SamplingOptions(temperature=0, num_predict=96)  # Ollama's default repeat_penalty 1.1
LOOP = SamplingOptions(temperature=0, num_predict=300, repeat_penalty=1.0, ignore_eos=True)

# name -> (requests, oracle?, together?)
WORKLOADS: dict[str, tuple[list[GenerateRequest], bool, bool]] = {
    "ngram/4-at-once/default-penalty": (four(DEFAULT), False, True),
    "ngram/4-at-once/no-penalty": (four(NOPEN), False, True),
    "ngram/4-at-once/const-prompts-no-penalty-300": (
        [GenerateRequest([1] + [300 + 13 * o] * 24, LOOP) for o in range(4)], False, True),
    "oracle/4-at-once/no-penalty": (four(NOPEN), True, True),
    "oracle/4-at-once/default-penalty": (four(DEFAULT), True, True),
    "oracle/alone/no-penalty": (four(NOPEN), True, False),
    "oracle/alone/default-penalty": (four(DEFAULT), True, False),
    "oracle/alone/long-200": ([GenerateRequest(prompt(16, 3), SamplingOptions(temperature=0, num_predict=200))],
                              True, False),
}


def penalised(s: SamplingOptions) -> bool:
    return s.repeat_penalty != 1.0 or s.frequency_penalty != 0 or s.presence_penalty != 0


def run(engine: Engine, requests: list[GenerateRequest], together: bool) -> tuple[list[Result], float]:
    t0 = time.perf_counter()
    if together:  # submitted together: they decode side by side
        handles = [engine.submit(r) for r in requests]
        results = [collect(h) for h in handles]
    else:
        results = [collect(engine.submit(r)) for r in requests]
    return results, time.perf_counter() - t0


def with_logprobs(requests: list[GenerateRequest]) -> list[GenerateRequest]:
    return [dataclasses.replace(r, sampling=dataclasses.replace(r.sampling, logprobs=True, top_logprobs=2))
            for r in requests]


def margin_at(result: Result, pos: int) -> float | None:
    lps = [lp for e in result.tokens for lp in e.logprobs]
    if pos < len(lps) and len(lps[pos].top) > 1:
        return round(lps[pos].top[0][1] - lps[pos].top[1][1], 6)
    return None


def info_dict(engine: Engine) -> dict[str, object]:
    i = engine.info
    return {"gpu_layers": i.gpu_layers, "offload_layers": i.offload_layers, "gpu_buffer_bytes": i.gpu_buffer_bytes,
            "cpu_buffer_bytes": i.cpu_buffer_bytes, "buffer_bytes": dict(i.buffer_bytes)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--num-gpu", type=int, default=None)
    ap.add_argument("--cpu-compare", action="store_true")
    ap.add_argument("--rounds", type=int, default=2, help="timed repetitions of each workload")
    args = ap.parse_args()
    gpu_build = bool(lc.llama_supports_gpu_offload())
    num_gpu = args.num_gpu if args.num_gpu is not None else (99 if gpu_build else 0)
    expect_gpu = gpu_build and num_gpu != 0
    print(f"smoke: llama_supports_gpu_offload={gpu_build} num_gpu={num_gpu} lib={lc.llama_cpp._base_path}",
          flush=True)
    failures: list[str] = []
    summary: dict[str, object] = {"gpu_build": gpu_build, "num_gpu": num_gpu}

    with tempfile.TemporaryDirectory() as tmp:
        path = str(write_tiny_gguf(Path(tmp) / "tiny.gguf"))
        base = LoadOptions(num_ctx=512, num_parallel=4, num_batch=64, num_gpu=num_gpu)
        t0 = time.perf_counter()
        plain = Engine(path, dataclasses.replace(base, speculative=False))
        spec = Engine(path, dataclasses.replace(base, speculative=True))
        summary["load_s_both"] = round(time.perf_counter() - t0, 3)
        try:
            for name, eng in (("plain", plain), ("spec", spec)):
                summary[f"info_{name}"] = info_dict(eng)
                print(f"smoke: {name} engine.info {summary[f'info_{name}']}", flush=True)
                if expect_gpu and eng.info.gpu_layers == 0:
                    failures.append(f"{name}: gpu_layers == 0 on a GPU build with num_gpu={num_gpu}")
            for eng in (plain, spec):  # warm-up: first CUDA decodes load kernels, build graphs
                run(eng, four(SamplingOptions(temperature=0, num_predict=16)), True)

            results: dict[str, object] = {}
            for name, (reqs, use_oracle, together) in WORKLOADS.items():
                judged = not penalised(reqs[0].sampling)
                OracleDrafter.references = []
                batcher.NgramDrafter = OracleDrafter if use_oracle else REAL_DRAFTER  # type: ignore[misc]
                try:
                    before = spec.stats()
                    want, _ = run(plain, with_logprobs(reqs), together)
                    OracleDrafter.references += [list(r.done.context) for r in want]
                    got, _ = run(spec, with_logprobs(reqs), together)
                    after = spec.stats()
                    want_ids, got_ids = [r.generated for r in want], [r.generated for r in got]
                    drafted = after.draft_tokens - before.draft_tokens
                    accepted = after.accepted_tokens - before.accepted_tokens
                    n_tokens = sum(len(x) for x in want_ids)
                    diffs = []
                    for k, (g, w) in enumerate(zip(got, want, strict=True)):
                        a, b = g.generated, w.generated
                        if a == b:
                            continue
                        pos = next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
                        d: dict[str, object] = {"request": k, "position": pos, "spec": a[pos:pos + 4],
                                                "plain": b[pos:pos + 4], "len_spec": len(a), "len_plain": len(b),
                                                "plain_top2_margin": margin_at(w, pos),
                                                "spec_top2_margin": margin_at(g, pos)}
                        m = d["plain_top2_margin"]
                        d["near_tie"] = isinstance(m, float) and m < NEAR_TIE
                        diffs.append(d)
                        if judged and not d["near_tie"]:
                            failures.append(f"{name}: spec and plain token ids differ, not at a near-tie: {d}")
                    if accepted > drafted:
                        failures.append(f"{name}: accepted {accepted} > drafted {drafted}")
                    if use_oracle and accepted == 0:
                        failures.append(f"{name}: the oracle's drafts were never confirmed")
                    kv = spec.batcher.kv  # type: ignore[union-attr]
                    kv.check_integrity()
                    if spec.stats().kv_cells_used != kv.cached_cells:
                        failures.append(f"{name}: stray KV cells after drafting")
                    # timing rounds (no logprobs)
                    t_plain: list[float] = []
                    t_spec: list[float] = []
                    for _ in range(args.rounds):
                        w2, tp = run(plain, reqs, together)
                        OracleDrafter.references += [list(r.done.context) for r in w2]
                        _, ts = run(spec, reqs, together)
                        t_plain.append(tp)
                        t_spec.append(ts)
                finally:
                    batcher.NgramDrafter = REAL_DRAFTER  # type: ignore[misc]
                results[name] = {
                    "same_ids": got_ids == want_ids, "judged": judged, "tokens": n_tokens,
                    "drafted": drafted, "accepted": accepted,
                    "plain_tok_s": round(n_tokens / min(t_plain), 1) if t_plain else None,
                    "spec_tok_s": round(n_tokens / min(t_spec), 1) if t_spec else None,
                    "plain_s": [round(t, 4) for t in t_plain], "spec_s": [round(t, 4) for t in t_spec],
                    "diffs": diffs,
                }
                print(f"smoke: {name}: {results[name]}", flush=True)
            summary["results"] = results
            stats = spec.stats()
            summary["spec_stats"] = dataclasses.asdict(stats)
            print(f"smoke: spec engine stats {summary['spec_stats']}", flush=True)
            if stats.accepted_tokens <= 0:
                failures.append("engine.stats().accepted_tokens == 0: no draft was ever confirmed")

            if args.cpu_compare and expect_gpu:  # informational: GPU vs CPU kernels round differently
                with Engine(path, dataclasses.replace(base, num_gpu=0, speculative=False)) as cpu:
                    cmp: dict[str, object] = {}
                    for name in ("ngram/4-at-once/no-penalty", "ngram/4-at-once/default-penalty"):
                        reqs, _, together = WORKLOADS[name]
                        c, _ = run(cpu, with_logprobs(reqs), together)
                        g, _ = run(plain, with_logprobs(reqs), together)
                        rows = []
                        for cr, gr in zip(c, g, strict=True):
                            a, b = cr.generated, gr.generated
                            pos = next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), None)
                            rows.append({"same": a == b, "first_diff": pos,
                                         "cpu_margin": margin_at(cr, pos) if pos is not None else None})
                        cmp[name] = rows
                    summary["cpu_vs_gpu"] = cmp
                    print(f"smoke: CPU vs GPU plain greedy (informational): {cmp}", flush=True)
        finally:
            plain.close()
            spec.close()

    summary["failures"] = failures
    out = os.environ.get("OUT")
    if out:
        Path(out, "smoke.json").write_text(json.dumps(summary, indent=1, default=str))
    if failures:
        print("SMOKE FAILED:\n  " + "\n  ".join(failures), flush=True)
        return 1
    print("SMOKE OK", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

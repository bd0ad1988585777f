"""Speculative decoding on a GPU: does the step-cost model see cheap rows, and does drafting raise tokens/s?

Usage: python .gpu/spec_bench.py MODEL.gguf [--num-gpu 99] [--rounds 3] [--deadline EPOCH_S]

Modes (a fresh Engine each, warmed up with one short request, LoadOptions(num_ctx=1024,
num_parallel=4, num_batch=256)):
  plain         speculative=False; its outputs are the oracle's references
  spec_cost     speculative=True, the real StepCost model
  spec_nomodel  speculative=True, StepCost.model -> None (always draft up to the cap)
  spec_synced   (extra, if time is left) as spec_cost, but llama_decode is followed by
                llama_synchronize inside the timed region, so StepCost sees the GPU's time
Workloads: 1 stream x 128 tokens; 4 streams x 128 tokens submitted together (greedy, no penalty,
ignore_eos). The drafter is an oracle (batcher.NgramDrafter patched) that drafts the greedy
continuation known from earlier runs; every 4th guess is spoilt at its 2nd token (~80 % accepted).
Step table: llama_decode timed directly on a context of its own (same settings), per
(sequences, rows per sequence): decode alone (what the batcher's StepCost records: llama.cpp does
not wait for the GPU in llama_decode) and decode + llama_synchronize (the GPU's step).
Writes $OUT/spec_gpu.json after each phase.
"""

from __future__ import annotations

import llama_cpp as lc  # first: the CUDA build segfaults at model load when numpy/gguf come first

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "integration" / "engine")]

from engine_helpers import Result, collect  # noqa: E402

from localrun.engine import batcher, native  # noqa: E402
from localrun.engine.engine import MAX_SEQ_IDS, Engine, kv_type  # noqa: E402
from localrun.engine.stepcost import StepCost  # noqa: E402
from localrun.engine.types import GenerateRequest, LoadOptions, SamplingOptions  # noqa: E402

REAL_DRAFTER = batcher.NgramDrafter
REAL_MODEL = StepCost.model
REAL_DECODE = native.Batch.decode
T0 = time.time()
SUMMARY: dict[str, object] = {}


def log(msg: str) -> None:
    print(f"[{time.time() - T0:7.1f}s] {msg}", flush=True)


def save() -> None:
    out = os.environ.get("OUT")
    if out:
        Path(out, "spec_gpu.json").write_text(json.dumps(SUMMARY, indent=1, default=str))


class OracleDrafter:
    """Drafts the known greedy continuation (from any earlier run whose context extends this
    sequence's tokens); every 4th guess is spoilt at its second token (its first if it has one)."""

    references: list[list[int]] = []
    calls = 0

    def propose(self, tokens: list[int], k: int) -> list[int]:
        n = len(tokens)
        for ref in self.references:
            if len(ref) > n and ref[n - 1] == tokens[-1] and ref[:n] == tokens:
                draft = ref[n: n + k]
                OracleDrafter.calls += 1
                if draft and OracleDrafter.calls % 4 == 0:
                    s = min(1, len(draft) - 1)
                    draft[s] = (draft[s] + 1) % 300 + 300
                return draft
        return []


# step accounting: the engine thread's Batcher.step, timed
STEPS = {"n": 0, "s": 0.0, "decode_s": 0.0}
_real_step = batcher.Batcher.step
_real_batcher_decode = batcher.Batcher._decode


def _timed_step(self: batcher.Batcher) -> bool:
    t = time.perf_counter()
    r = _real_step(self)
    if r:
        STEPS["n"] += 1
        STEPS["s"] += time.perf_counter() - t
    return r


def _timed_decode(self: batcher.Batcher, participants: list) -> bool:  # type: ignore[type-arg]
    t = time.perf_counter()
    r = _real_batcher_decode(self, participants)
    STEPS["decode_s"] += time.perf_counter() - t
    return r


batcher.Batcher.step = _timed_step  # type: ignore[method-assign]
batcher.Batcher._decode = _timed_decode  # type: ignore[method-assign]


def synced_decode(self: native.Batch, ctx: lc.llama_context_p) -> int:
    rc = REAL_DECODE(self, ctx)
    lc.llama_synchronize(ctx)
    return rc


def prompt(n: int, offset: int) -> list[int]:
    return [1] + [300 + (offset + 7 * i) % 400 for i in range(n)]


SAMPLING = SamplingOptions(temperature=0, num_predict=128, repeat_penalty=1.0, ignore_eos=True)
WORKLOADS = {
    "1x128": [GenerateRequest(prompt(24, 5), SAMPLING)],
    "4x128": [GenerateRequest(prompt(20 + 3 * i, 11 * i), SAMPLING) for i in range(4)],
}


def run(engine: Engine, requests: list[GenerateRequest]) -> tuple[list[Result], float]:
    t0 = time.perf_counter()
    handles = [engine.submit(r) for r in requests]
    results = [collect(h) for h in handles]
    return results, time.perf_counter() - t0


def warm(engine: Engine) -> None:
    run(engine, [GenerateRequest(prompt(8, 123), SamplingOptions(temperature=0, num_predict=16,
                                                                   repeat_penalty=1.0, ignore_eos=True))])


def first_diff(a: list[int], b: list[int]) -> int | None:
    if a == b:
        return None
    return next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def fit(points: list[tuple[int, float]]) -> dict[str, float] | None:
    if len(points) < 2:
        return None
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    per_row = sum((x - mx) * (y - my) for x, y in points) / sxx
    return {"fixed_ms": round((my - per_row * mx) * 1e3, 4), "per_row_ms": round(per_row * 1e3, 4)}


def mode_run(name: str, path: str, options: LoadOptions, rounds: int, references: dict[str, list[list[int]]],
             want: dict[str, list[list[int]]] | None) -> tuple[Engine, dict[str, object]]:
    t = time.perf_counter()
    engine = Engine(path, options)
    res: dict[str, object] = {"load_s": round(time.perf_counter() - t, 2),
                              "gpu_layers": engine.info.gpu_layers, "offload_layers": engine.info.offload_layers}
    warm(engine)
    res["after_warmup_cost_model"] = repr(engine.batcher.step_cost.model())  # type: ignore[union-attr]
    for wname, reqs in WORKLOADS.items():
        times: list[float] = []
        eval_rates: list[float] = []
        ids_rounds: list[list[list[int]]] = []
        steps: list[dict[str, float]] = []
        before = engine.stats()
        for _ in range(rounds):
            STEPS.update(n=0, s=0.0, decode_s=0.0)
            results, dt = run(engine, reqs)
            steps.append({"steps": STEPS["n"], "step_ms": round(1e3 * STEPS["s"] / max(STEPS["n"], 1), 3),
                          "in_decode_ms": round(1e3 * STEPS["decode_s"] / max(STEPS["n"], 1), 3)})
            times.append(dt)
            ids = [r.generated for r in results]
            ids_rounds.append(ids)
            references[wname] += [list(r.done.context) for r in results]
            eval_rates.append(sum(r.done.eval_count - 1 for r in results)
                              / max(max(r.done.eval_duration for r in results) / 1e9, 1e-9))
        after = engine.stats()
        n_tok = sum(len(x) for x in ids_rounds[0])
        base = want[wname] if want is not None else ids_rounds[0]
        match = []
        for ids in ids_rounds:
            match.append([first_diff(a, b) for a, b in zip(ids, base, strict=True)])
        w: dict[str, object] = {
            "tokens": n_tok,
            "tok_s_best": round(n_tok / min(times), 1), "tok_s_median": round(n_tok / statistics.median(times), 1),
            "eval_tok_s_best": round(max(eval_rates), 1),
            "wall_s": [round(x, 4) for x in times],
            "steps": steps,
            "drafted": after.draft_tokens - before.draft_tokens,
            "accepted": after.accepted_tokens - before.accepted_tokens,
            "ids_first_diff_vs_plain": match,  # per round, per request: None = identical to plain's first round
            "all_ids_match_plain": all(d is None for m in match for d in m),
        }
        if options.speculative:
            sc = engine.batcher.step_cost  # type: ignore[union-attr]
            w["cost_model_after"] = repr(sc.model())
            w["real_cost_model_after"] = repr(REAL_MODEL(sc))
            w["step_cost_means_ms"] = {f"{r}x{2 ** c}": (round(m.seconds * 1e3, 4), m.count)
                                       for (r, c), m in sorted(sc._means.items())}
        if want is None:
            want_ids = ids_rounds[0]
            res.setdefault("_want", {})[wname] = want_ids  # type: ignore[index]
        res[wname] = w
        log(f"{name} {wname}: {json.dumps({k: v for k, v in w.items() if k != 'ids_first_diff_vs_plain'})}")
    return engine, res


def step_table(engine: Engine, options: LoadOptions, n_iter: int) -> dict[str, object]:
    model = engine._model
    spec = native.ContextSpec(n_ctx=options.num_ctx * options.num_parallel,
                              n_seq_max=min(MAX_SEQ_IDS, options.num_parallel + max(8, 2 * options.num_parallel)),
                              n_batch=options.num_batch, n_threads=engine.threads, swa_full=False,
                              kv_type=kv_type(options))
    ctx = native.create_context(model, spec)
    mem = lc.llama_get_memory(ctx)
    b = native.Batch(options.num_batch)
    P = 100
    for s in range(4):
        b.clear()
        b.add(s, 0, prompt(P - 1, 17 * s), want_last_logits=True)
        assert b.decode(ctx) == 0
        lc.llama_synchronize(ctx)
    table: dict[str, object] = {}
    configs = [(1, r) for r in (1, 2, 3, 4, 5, 8, 16)] + [(4, r) for r in (1, 2, 3, 5)]
    for nseq, rows in configs:
        dec, full = [], []
        for it in range(3 + n_iter):
            b.clear()
            for s in range(nseq):
                b.add_all(s, P, [300 + (it + j) % 50 for j in range(rows)])
            t0 = time.perf_counter()
            rc = b.decode(ctx)
            t1 = time.perf_counter()
            lc.llama_synchronize(ctx)
            lc.llama_get_logits_ith(ctx, 0)
            t2 = time.perf_counter()
            assert rc == 0, rc
            for s in range(nseq):
                lc.llama_memory_seq_rm(mem, s, P, -1)
            if it >= 3:
                dec.append(t1 - t0)
                full.append(t2 - t0)
        table[f"{nseq}seq_x{rows}rows"] = {
            "rows_total": nseq * rows,
            "decode_only_ms_median": round(statistics.median(dec) * 1e3, 4),
            "decode_sync_ms_median": round(statistics.median(full) * 1e3, 4),
            "decode_sync_ms_min": round(min(full) * 1e3, 4),
        }
    lc.llama_free(ctx)
    one = [(v["rows_total"], v["decode_sync_ms_median"] / 1e3) for k, v in table.items()  # type: ignore[index]
           if k.startswith("1seq") and v["rows_total"] <= 5]  # type: ignore[index]
    one_dec = [(v["rows_total"], v["decode_only_ms_median"] / 1e3) for k, v in table.items()  # type: ignore[index]
               if k.startswith("1seq") and v["rows_total"] <= 5]  # type: ignore[index]
    return {"table": table, "fit_1seq_1to5_decode_sync": fit(one), "fit_1seq_1to5_decode_only": fit(one_dec)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--num-gpu", type=int, default=99)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--deadline", type=float, default=0.0, help="epoch seconds; later phases are skipped past it")
    args = ap.parse_args()

    def left() -> float:
        return args.deadline - time.time() if args.deadline else 1e9

    gpu = bool(lc.llama_supports_gpu_offload())
    SUMMARY.update(gpu_build=gpu, model=args.model, model_bytes=os.path.getsize(args.model), rounds=args.rounds,
                   workloads={k: len(v) for k, v in WORKLOADS.items()}, sampling=repr(SAMPLING))
    base = LoadOptions(num_ctx=1024, num_parallel=4, num_batch=256, num_gpu=args.num_gpu)
    references: dict[str, list[list[int]]] = {k: [] for k in WORKLOADS}
    OracleDrafter.references = []
    modes: dict[str, object] = {}
    SUMMARY["modes"] = modes

    log(f"gpu_build={gpu}; mode plain")
    engine, res = mode_run("plain", args.model, dataclasses.replace(base, speculative=False), args.rounds,
                           references, None)
    want = res.pop("_want")  # type: ignore[assignment]
    modes["plain"] = res
    SUMMARY["n_params"] = engine.info.n_params
    save()
    log("step table")
    try:
        SUMMARY["step_table"] = step_table(engine, base, args.iters)
    except Exception as exc:  # noqa: BLE001
        SUMMARY["step_table"] = f"failed: {exc!r}"
    log(f"step table: {json.dumps(SUMMARY['step_table'])}")
    engine.close()
    save()

    batcher.NgramDrafter = OracleDrafter  # type: ignore[misc,assignment]
    plan = [("spec_cost", None), ("spec_nomodel", "nomodel"), ("spec_synced", "synced")]
    for name, patch in plan:
        if left() < 25:
            log(f"skipping {name}: {left():.0f}s left")
            modes[name] = "skipped: no time"
            continue
        # the oracle drafts from plain's runs first, then from earlier spec runs
        OracleDrafter.references = [r for w in WORKLOADS for r in references[w]]
        OracleDrafter.calls = 0
        if patch == "nomodel":
            StepCost.model = lambda self: None  # type: ignore[method-assign,assignment,return-value]
        if patch == "synced":
            native.Batch.decode = synced_decode  # type: ignore[method-assign]
        try:
            engine, res = mode_run(name, args.model, dataclasses.replace(base, speculative=True), args.rounds,
                                   references, want)  # type: ignore[arg-type]
            res["stats"] = dataclasses.asdict(engine.stats())
            engine.close()
        except Exception as exc:  # noqa: BLE001
            res = {"failed": repr(exc)}
        finally:
            StepCost.model = REAL_MODEL  # type: ignore[method-assign]
            native.Batch.decode = REAL_DECODE  # type: ignore[method-assign]
        modes[name] = res
        save()

    table = {}
    for name, res in modes.items():
        if isinstance(res, dict) and "failed" not in res:
            table[name] = {w: res[w]["tok_s_best"] for w in WORKLOADS if w in res}  # type: ignore[index]
    SUMMARY["tok_s_best_table"] = table
    SUMMARY["elapsed_s"] = round(time.time() - T0, 1)
    save()
    print("SPEC_GPU_JSON " + json.dumps(SUMMARY, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

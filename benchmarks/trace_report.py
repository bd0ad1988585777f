"""Where the time goes between a request's arrival and its first token, and in a decode step.

    python benchmarks/trace_report.py DIR [--decode-batch N ...]

DIR holds the ``trace-<pid>.jsonl`` files a daemon started with ``LOCALRUN_TRACE=DIR`` and its
runners wrote (``localrun/trace.py`` describes the marks). Prints, as Markdown:

1. the first-token path, stage by stage (median and p90 over the streamed requests that got a
   first token), from the handler's start to the first token's chunk written to the socket;
2. the steady decode steps with exactly N tokens in the batch (default: every batch size seen
   in at least 20 steps with no prompt tokens): ``llama_decode``, the engine's own work after it
   (sampling, detokenizing, events), the gap to the next step, and the runner-writer and daemon
   delays of the step's frame.
"""

from __future__ import annotations

import argparse
import bisect
import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

# (label, from stage, to stage, side): consecutive stages of the first-token path
PATH = (
    ("HTTP: headers to body parsed", "http", "parsed", "daemon"),
    ("resolve model + options", "parsed", "target", "daemon"),
    ("template render (+ system prefix), in a thread", "target", "rendered", "daemon"),
    ("scheduler: hold the model", "rendered|target", "leased", "daemon"),
    ("num_keep: tokenize round trip to the runner", "leased", "num_keep", "daemon"),
    ("encode + write the generate frame", "num_keep|leased", "sent", "daemon"),
    ("pipe to the runner, frame read", "sent", "recv", "cross"),
    ("runner: tokenize, validate, build sampler, queue", "recv", "submitted", "runner"),
    ("wait for admission (the step in progress)", "submitted", "admitted", "engine"),
    ("prefill (llama_decode steps) + first sample", "admitted", "prefilled", "engine"),
    ("event to the writer, frame written", "prefilled", "first_written", "engine"),
    ("pipe to the daemon, decode, dispatch, queue", "first_written", "first_event", "cross"),
    ("SSE chunk encoded and written", "first_event", "first_chunk", "daemon"),
)


def load(directory: Path) -> dict[int, list[tuple[int, str, Any, Any]]]:
    """Every trace file's events by pid, sorted by time."""
    out: dict[int, list[tuple[int, str, Any, Any]]] = {}
    for path in sorted(directory.glob("trace-*.jsonl")):
        pid = int(path.stem.split("-")[1])
        events = [tuple(json.loads(line)) for line in path.read_text().splitlines() if line.strip()]
        out[pid] = sorted(events)  # type: ignore[arg-type]
    return out


def first_token_paths(traces: dict[int, list[tuple[int, str, Any, Any]]]) -> list[dict[str, int]]:
    """Per streamed request: the time of each stage of :data:`PATH`, in ns."""
    runner_marks: dict[tuple[int, int], dict[str, int]] = defaultdict(dict)  # (pid, rid) -> stage -> t
    engine_marks: dict[tuple[int, int], dict[str, int]] = defaultdict(dict)  # (pid, engine id) -> stage -> t
    engine_of: dict[tuple[int, int], int] = {}
    daemon: dict[int, dict[str, int]] = defaultdict(dict)
    written: dict[int, list[int]] = defaultdict(list)
    link: dict[int, tuple[int, int]] = {}
    for pid, events in traces.items():
        for t, stage, key, value in events:
            if stage in ("recv", "first_written"):
                runner_marks[(pid, int(key))].setdefault(stage, t)
            elif stage == "submitted":
                runner_marks[(pid, int(key))][stage] = t
                engine_of[(pid, int(key))] = int(value)
            elif stage in ("admitted", "prefilled"):
                engine_marks[(pid, int(key))].setdefault(stage, t)
            elif stage == "written":
                written[int(key)].append(t)
            elif stage == "sent":
                runner_pid, rid = (int(x) for x in str(value).split(":"))
                link[int(key)] = (runner_pid, rid)
                daemon[int(key)][stage] = t
            elif stage in ("http", "parsed", "target", "rendered", "leased", "num_keep", "first_event", "accepted"):
                daemon[int(key)].setdefault(stage, t)
    paths = []
    for key, marks in daemon.items():
        if key not in link or "first_event" not in marks:
            continue
        runner_key = link[key]
        marks = dict(marks)
        marks.update(runner_marks.get(runner_key, {}))
        engine_id = engine_of.get(runner_key)
        if engine_id is not None:
            marks.update(engine_marks.get((runner_key[0], engine_id), {}))
        after = [t for t in written[key] if t >= marks["first_event"]]
        if after:
            marks["first_chunk"] = after[0]
        paths.append(marks)
    return paths


def _pick(marks: dict[str, int], names: str) -> int | None:
    for name in names.split("|"):
        if name in marks:
            return marks[name]
    return None


def _ms(values: list[float]) -> str:
    if not values:
        return "-"
    values = sorted(values)
    p90 = values[min(len(values) - 1, int(round(0.9 * (len(values) - 1))))]
    return f"{statistics.median(values):.2f} / {p90:.2f}"


def print_first_token(paths: list[dict[str, int]]) -> None:
    print(f"### First token: {len(paths)} streamed requests (ms, median / p90)\n")
    print("| stage | where | ms (median / p90) | share of the median total |")
    print("|---|---|---|---|")
    totals = [p["first_chunk"] - p["http"] for p in paths if "first_chunk" in p and "http" in p]
    total_median = statistics.median(totals) / 1e6 if totals else 0.0
    for label, start, end, side in PATH:
        values = []
        for marks in paths:
            a, b = _pick(marks, start), _pick(marks, end)
            if a is not None and b is not None and end.split("|")[0] in marks:
                values.append((b - a) / 1e6)
        if not values:
            continue
        share = statistics.median(values) / total_median if total_median else 0.0
        print(f"| {label} | {side} | {_ms(values)} | {share:.0%} |")
    print(f"| **handler start to first token written** | | **{_ms([t / 1e6 for t in totals])}** | 100% |\n")


def decode_steps(traces: dict[int, list[tuple[int, str, Any, Any]]], sizes: list[int] | None) -> None:
    """Steady decode steps per batch size (see the module docstring)."""
    rows: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    daemon_reads = sorted(t for events in traces.values() for t, stage, _, _ in events if stage == "frame_read")
    for events in traces.values():
        engine = [(t, s, v) for t, s, _, v in events if s in ("step", "decoded", "advanced")]
        frames = [t for t, s, _, _ in events if s == "frame_written"]
        for i in range(len(engine) - 2):
            (t, s0, n_tokens), (t_dec, s1, n_part), (t_adv, s2, _) = engine[i:i + 3]
            if (s0, s1, s2) != ("step", "decoded", "advanced") or n_part != n_tokens:
                continue  # not a whole step, or prompt tokens in the batch
            row = rows[int(n_tokens)]
            row["llama_decode"].append((t_dec - t) / 1e6)
            row["engine work after it (sample, detok, events)"].append((t_adv - t_dec) / 1e6)
            if i + 3 < len(engine) and engine[i + 3][1] == "step":
                row["gap to the next step"].append((engine[i + 3][0] - t_adv) / 1e6)
                row["step to step"].append((engine[i + 3][0] - t) / 1e6)
            j = bisect.bisect_left(frames, t_dec)
            frame = frames[j] if j < len(frames) else None
            if frame is not None and frame - t_adv < 100e6:
                row["runner writer: events to frame written"].append(max(0, frame - t_adv) / 1e6)
                k = bisect.bisect_left(daemon_reads, frame)
                read = daemon_reads[k] if k < len(daemon_reads) else None
                if read is not None and read - frame < 100e6:
                    row["daemon: frame written to frame read"].append((read - frame) / 1e6)
    wanted = sizes or sorted(n for n, row in rows.items() if len(row["llama_decode"]) >= 20)
    for n in wanted:
        row = rows.get(n)
        if not row:
            continue
        print(f"### Decode steps of {n} token(s): {len(row['llama_decode'])} steps (ms, median / p90)\n")
        print("| part | ms (median / p90) |")
        print("|---|---|")
        for part, values in row.items():
            print(f"| {part} | {_ms(values)} |")
        print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directory", type=Path)
    parser.add_argument("--decode-batch", type=int, action="append", help="batch sizes to report (repeatable)")
    args = parser.parse_args()
    traces = load(args.directory)
    print_first_token(first_token_paths(traces))
    decode_steps(traces, args.decode_batch)


if __name__ == "__main__":
    main()

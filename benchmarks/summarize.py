"""The tables BENCHMARKS.md quotes, from one ``benchmarks/run_all.sh`` results folder.

    python benchmarks/summarize.py OUT_DIR   (writes OUT_DIR/summary.md and prints it)

OUT_DIR holds one folder per model (``gemma``, ``qwen``) with ``ceiling.jsonl`` and the
``localrun bench --json`` files of each scenario, and optionally ``startup.json``. Every figure is
a ratio to llama-server measured in the same ``localrun bench`` invocation, as issue #15 states its
targets: "tuned" is ``-np 16 --kv-unified -c 65536``, "Ollama default" is ``-np 1 -c 4096``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

LOCALRUN, TUNED, OLLAMA, LCP = "localrun", "llama-server", "llama-server np=1", "llama-cpp-python"


def _levels(path: Path) -> dict[tuple[str, int], dict[str, Any]]:
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    return {(lv["target"], lv["concurrency"]): lv for lv in data["levels"]}


def _ms(s: float | None) -> str:
    return "-" if s is None else (f"{s * 1000:,.0f} ms" if s < 10 else f"{s:,.1f} s")


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _verdict(value: float | None, target: float, higher: bool) -> str:
    if value is None:
        return "not measured"
    ok = value >= target if higher else value <= target
    return f"{value:.2f}: **met**" if ok else f"{value:.2f}: missed by {abs(value - target) / target:.0%}"


def _get(lv: dict[str, Any] | None, *path: str) -> float | None:
    value: Any = lv
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return float(value) if isinstance(value, (int, float)) else None


def model_section(name: str, folder: Path) -> list[str]:
    lines = [f"### {name}", ""]
    ceiling = {}
    if (folder / "ceiling.jsonl").exists():
        ceiling = {r["parallel"]: r for r in map(json.loads, (folder / "ceiling.jsonl").read_text().splitlines())}
    conc = _levels(folder / "concurrency.json")
    lines += ["| streams | ceiling decode tok/s | " + " | ".join(f"{t} tok/s" for t in (LOCALRUN, TUNED, OLLAMA, LCP))
              + " | localrun TTFT p50 / p95 | llama-server TTFT p50 / p95 | np=1 TTFT p95 | localrun decode tok/s (streams / TPOT p50) |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for c in (1, 4, 8, 16):
        lr = conc.get((LOCALRUN, c))
        if lr is None:
            continue
        tput = [_get(conc.get((t, c)), "output_tok_s") for t in (LOCALRUN, TUNED, OLLAMA, LCP)]
        tpot = _get(lr, "tpot", "p50")
        tuned = conc.get((TUNED, c))
        lines.append(
            f"| {c} | {ceiling.get(c, {}).get('decode_tok_s', '-')} | "
            + " | ".join("-" if t is None else f"{t:.1f}" for t in tput)
            + f" | {_ms(_get(lr, 'ttft', 'p50'))} / {_ms(_get(lr, 'ttft', 'p95'))}"
            + f" | {_ms(_get(tuned, 'ttft', 'p50'))} / {_ms(_get(tuned, 'ttft', 'p95'))}"
            + f" | {_ms(_get(conc.get((OLLAMA, c)), 'ttft', 'p95'))}"
            + f" | {'-' if not tpot else f'{c / tpot:.1f}'} |")
    lines.append("")
    targets: list[tuple[str, str]] = []

    def tput(table: dict[tuple[str, int], dict[str, Any]], target: str, c: int) -> float | None:
        return _get(table.get((target, c)), "output_tok_s")

    def ttft(table: dict[tuple[str, int], dict[str, Any]], target: str, c: int, q: str) -> float | None:
        return _get(table.get((target, c)), "ttft", q)

    targets.append(("1 stream: aggregate >= 1.0x tuned", _verdict(_ratio(tput(conc, LOCALRUN, 1), tput(conc, TUNED, 1)), 1.0, True)))
    targets.append(("1 stream: TTFT p50 <= 1.05x tuned", _verdict(_ratio(ttft(conc, LOCALRUN, 1, "p50"), ttft(conc, TUNED, 1, "p50")), 1.05, False)))
    for c in (4, 8, 16):
        targets.append((f"{c} streams: aggregate >= 1.1x tuned", _verdict(_ratio(tput(conc, LOCALRUN, c), tput(conc, TUNED, c)), 1.1, True)))
        targets.append((f"{c} streams: TTFT p95 <= tuned's (ratio)", _verdict(_ratio(ttft(conc, LOCALRUN, c, "p95"), ttft(conc, TUNED, c, "p95")), 1.0, False)))
    targets.append(("8 streams: aggregate >= 3x Ollama default", _verdict(_ratio(tput(conc, LOCALRUN, 8), tput(conc, OLLAMA, 8)), 3.0, True)))
    tpot8 = _get(conc.get((LOCALRUN, 8)), "tpot", "p50")
    ceil8 = ceiling.get(8, {}).get("decode_tok_s")
    targets.append(("decode at 8 streams >= 0.9 x kernel ceiling (8 / TPOT p50 against ceiling.py)",
                    _verdict(_ratio(8 / tpot8 if tpot8 else None, ceil8), 0.9, True)))
    pre = _levels(folder / "shared_prefix.json")
    if pre:
        lines += ["| 8 streams, 1,300-token shared prefix | tok/s | TTFT p50 | TTFT p95 |", "|---|---|---|---|"]
        for t in (LOCALRUN, TUNED, OLLAMA, LCP):
            if (t, 8) in pre:
                lines.append(f"| {t} | {tput(pre, t, 8):.1f} | {_ms(ttft(pre, t, 8, 'p50'))} | {_ms(ttft(pre, t, 8, 'p95'))} |")
        lines.append("")
        targets.append(("shared prefix: aggregate >= 3x tuned", _verdict(_ratio(tput(pre, LOCALRUN, 8), tput(pre, TUNED, 8)), 3.0, True)))
        targets.append(("shared prefix: TTFT p50 <= 1/4 of tuned's (ratio <= 0.25)",
                        _verdict(_ratio(ttft(pre, LOCALRUN, 8, "p50"), ttft(pre, TUNED, 8, "p50")), 0.25, False)))
    long = _levels(folder / "long_prompt.json")
    if long:
        lines += ["| one 2,000-token prompt | TTFT p50 | TTFT max |", "|---|---|---|"]
        for t in (LOCALRUN, TUNED, OLLAMA, LCP):
            if (t, 1) in long:
                lines.append(f"| {t} | {_ms(ttft(long, t, 1, 'p50'))} | {_ms(ttft(long, t, 1, 'max'))} |")
        lines.append("")
        targets.append(("2,000-token prompt: TTFT <= 1.05x tuned", _verdict(_ratio(ttft(long, LOCALRUN, 1, "p50"), ttft(long, TUNED, 1, "p50")), 1.05, False)))
    rep, restarted = _levels(folder / "repeat.json"), _levels(folder / "repeat_restarted.json")
    if rep:
        lines += ["| repeated prompts | streams | TTFT p50 (server running) | TTFT p50 (after a restart) |", "|---|---|---|---|"]
        for (t, c) in sorted(rep):
            lines.append(f"| {t} | {c} | {_ms(ttft(rep, t, c, 'p50'))} | {_ms(ttft(restarted, t, c, 'p50'))} |")
        lines.append("")
        for c in sorted({c for _, c in rep}):
            targets.append((f"repeated prompts, {c} streams: TTFT p50 <= tuned's", _verdict(_ratio(ttft(rep, LOCALRUN, c, "p50"), ttft(rep, TUNED, c, "p50")), 1.0, False)))
            if restarted:
                targets.append((f"repeated prompts after a restart, {c} streams: TTFT p50 <= tuned's while running",
                                _verdict(_ratio(ttft(restarted, LOCALRUN, c, "p50"), ttft(rep, TUNED, c, "p50")), 1.0, False)))
    lines += ["| target (ratio localrun / llama-server) | value |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in targets]
    return lines + [""]


def startup_section(path: Path) -> list[str]:
    if not path.exists():
        return []
    data = json.loads(path.read_text())
    lines = ["### Start-up and switching (median of runs, seconds; RSS in MB)", "", "| measure | value | target |",
             "|---|---|---|"]
    targets = {"localrun cold start s": "<= 2 s", "localrun switch s": "b -> a (the starter) <= 1 s",
               "daemon RSS at start MB": "<= 80 MB", "daemon RSS idle after switching MB": "<= 80 MB"}
    for key, value in data.items():
        if isinstance(value, dict):
            for sub, vals in value.items():
                lines.append(f"| {key}, {sub} | {sorted(vals)[len(vals) // 2]:.2f} | {targets.get(key, '')} |")
        elif isinstance(value, list):
            lines.append(f"| {key} | {sorted(value)[len(value) // 2]:.2f} | {targets.get(key, '')} |")
        elif isinstance(value, float):
            lines.append(f"| {key} | {value:.1f} | {targets.get(key, '')} |")
    return lines + [""]


def main() -> None:
    out = Path(sys.argv[1])
    lines = [f"## benchmarks/run_all.sh results ({out.name})", ""]
    machine = out / "machine.txt"
    if machine.exists():
        lines += ["```", machine.read_text().strip(), "```", ""]
    for folder in sorted(p for p in out.iterdir() if p.is_dir()):
        lines += model_section(folder.name, folder)
    lines += startup_section(out / "startup.json")
    text = "\n".join(lines)
    (out / "summary.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()

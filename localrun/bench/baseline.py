"""``localrun bench --baseline FILE``: compare a run with a stored one and flag regressions.

Both sides are the JSON that ``--json`` writes (:meth:`BenchResult.as_dict`). Levels are matched by
(target label, concurrency). A regression is aggregate output tok/s lower by more than the threshold,
or TTFT p50 / TTFT p95 / TPOT p50 higher by more than it (10 % by default: an engine upgrade that
slows decoding or prefill is caught, while run-to-run noise on a quiet machine stays below it).
Runs of different workloads (prompt and output lengths, shared prefix, endpoint, repeated
prompts) are not comparable: :func:`compare` refuses them with a BenchError.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from ..errors import BenchError
from ..jsontypes import JSONObject, JSONValue, as_object, as_objects

BASELINE_THRESHOLD = 0.10
WORKLOAD_KEYS = ("api", "input_tokens", "output_tokens", "shared_prefix", "repeat_prompts")
# (metric, path in a level, True when higher is better)
METRICS: tuple[tuple[str, tuple[str, ...], bool], ...] = (
    ("out tok/s", ("output_tok_s",), True),
    ("TTFT p50", ("ttft", "p50"), False),
    ("TTFT p95", ("ttft", "p95"), False),
    ("TPOT p50", ("tpot", "p50"), False),
)


@dataclass(frozen=True, slots=True)
class Change:
    """One metric of one level, before (baseline) and now."""

    target: str
    concurrency: int
    metric: str
    before: float
    after: float
    higher_is_better: bool
    threshold: float = BASELINE_THRESHOLD

    @property
    def change(self) -> float:
        """Relative change, now against before (+0.12 = 12 % higher)."""
        return self.after / self.before - 1 if self.before else 0.0

    def worse_by(self) -> float:
        """How much worse, as a fraction (negative when better)."""
        return -self.change if self.higher_is_better else self.change

    @property
    def regression(self) -> bool:
        return self.worse_by() > self.threshold


def read_baseline(path: Path) -> JSONObject:
    """The stored run; a BenchError when it is missing or not a ``--json`` result."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BenchError(f"--baseline {path}: cannot read it ({exc.strerror})") from exc
    except ValueError as exc:
        raise BenchError(f"--baseline {path}: not JSON ({exc})") from exc
    if not isinstance(data, dict) or not isinstance(data.get("levels"), list):
        raise BenchError(f"--baseline {path}: not a result written by `localrun bench --json`")
    return data


def _metric(level: JSONObject, path: tuple[str, ...]) -> float | None:
    value: JSONValue = level
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def compare(current: JSONObject, baseline: JSONObject, threshold: float = BASELINE_THRESHOLD) -> list[Change]:
    """Every metric of every level present in both runs (see the module docstring)."""
    now_cfg, old_cfg = as_object(current.get("config")), as_object(baseline.get("config"))
    differ = [k for k in WORKLOAD_KEYS if now_cfg.get(k, False) != old_cfg.get(k, False)]
    if differ:
        detail = ", ".join(f"{k} {old_cfg.get(k)} -> {now_cfg.get(k)}" for k in differ)
        raise BenchError(f"the baseline measured another workload ({detail}); compare like with like")
    old = {(lv.get("target"), lv.get("concurrency")): lv for lv in as_objects(baseline.get("levels"))}
    changes: list[Change] = []
    for level in as_objects(current.get("levels")):
        before = old.get((level.get("target"), level.get("concurrency")))
        if before is None:
            continue
        for name, path, higher in METRICS:
            a, b = _metric(before, path), _metric(level, path)
            if a is not None and b is not None and a > 0:
                changes.append(Change(str(level["target"]), _int(level["concurrency"]), name, a, b, higher,
                                      threshold))
    return changes


def _int(value: JSONValue) -> int:
    """A level's concurrency, as ``int()`` reads it (a run that wrote no number is not a result)."""
    if isinstance(value, (int, float, str)):
        return int(value)
    raise BenchError(f"not a concurrency: {value!r}")


def _fmt(metric: str, value: float) -> str:
    if metric == "out tok/s":
        return f"{value:,.1f}"
    return f"{value * 1000:,.0f} ms" if value < 10 else f"{value:,.1f} s"


def print_changes(changes: list[Change], source: str, threshold: float = BASELINE_THRESHOLD,
                  file: TextIO | None = None) -> None:
    """One line per compared metric, regressions marked; then a verdict line."""
    out = file or sys.stdout
    if not changes:
        print(f"baseline {source}: no level of this run was measured there (targets and concurrency differ)",
              file=out)
        return
    print(f"compared with {source} (regression: {threshold:.0%} worse):", file=out)
    for ch in changes:
        mark = "REGRESSION" if ch.regression else ("better" if ch.worse_by() < -threshold else "")
        print(f"  {ch.target} @ {ch.concurrency}  {ch.metric:9}  {_fmt(ch.metric, ch.before):>9} -> "
              f"{_fmt(ch.metric, ch.after):>9}  {ch.change:+.1%}  {mark}".rstrip(), file=out)
    bad = [ch for ch in changes if ch.regression]
    if bad:
        print(f"{len(bad)} regression(s) of more than {threshold:.0%} against {source}", file=out)
    else:
        print(f"no regression of more than {threshold:.0%} against {source}", file=out)

"""`localrun bench --baseline`: which changes count as regressions, and runs that cannot be compared."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from localrun.bench.baseline import compare, print_changes, read_baseline
from localrun.errors import BenchError


def _run(tok_s: float, ttft: float, tpot: float = 0.02, **cfg: Any) -> dict[str, Any]:
    config = {"api": "completions", "input_tokens": 128, "output_tokens": 64, "shared_prefix": 0,
              "repeat_prompts": False, **cfg}
    level = {"target": "localrun", "concurrency": 8, "output_tok_s": tok_s,
             "ttft": {"p50": ttft, "p95": ttft * 1.5}, "tpot": {"p50": tpot}}
    return {"config": config, "levels": [level]}


def test_a_slower_engine_is_flagged_and_noise_is_not() -> None:
    slower = compare(_run(80.0, 1.0), _run(100.0, 1.0))
    assert [c.metric for c in slower if c.regression] == ["out tok/s"]
    later_first_token = compare(_run(100.0, 1.2), _run(100.0, 1.0))
    assert {c.metric for c in later_first_token if c.regression} == {"TTFT p50", "TTFT p95"}
    noise = compare(_run(95.0, 1.05, 0.021), _run(100.0, 1.0, 0.02))
    assert not any(c.regression for c in noise)
    faster = compare(_run(130.0, 0.5), _run(100.0, 1.0))
    assert not any(c.regression for c in faster)


def test_levels_are_matched_by_target_and_concurrency() -> None:
    other = _run(10.0, 9.0)
    other["levels"][0]["target"] = "llama-server"
    assert compare(other, _run(100.0, 1.0)) == []
    out = io.StringIO()
    print_changes([], "old.json", file=out)
    assert "no level" in out.getvalue()


def test_another_workload_cannot_be_compared() -> None:
    with pytest.raises(BenchError, match="input_tokens 128 -> 2000"):
        compare(_run(100.0, 1.0, input_tokens=2000), _run(100.0, 1.0))
    with pytest.raises(BenchError, match="repeat_prompts"):
        compare(_run(100.0, 1.0, repeat_prompts=True), _run(100.0, 1.0))


def test_the_verdict_names_each_regression() -> None:
    out = io.StringIO()
    print_changes(compare(_run(80.0, 1.0), _run(100.0, 1.0)), "old.json", file=out)
    text = out.getvalue()
    assert "localrun @ 8  out tok/s" in text and "-20.0%  REGRESSION" in text
    assert "1 regression(s)" in text


def test_a_missing_or_foreign_baseline_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(BenchError, match="cannot read"):
        read_baseline(tmp_path / "nope.json")
    (tmp_path / "x.json").write_text("[1, 2]")
    with pytest.raises(BenchError, match="not a result"):
        read_baseline(tmp_path / "x.json")
    (tmp_path / "y.json").write_text(json.dumps(_run(1.0, 1.0)))
    assert read_baseline(tmp_path / "y.json")["levels"]

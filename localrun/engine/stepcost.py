"""What one more row costs a decode step, learned from the steps the engine runs.

Speculative decoding pays off only where a decode row is cheap next to the step: a step that
reads the weights once for every row (memory-bound: GPUs, Apple silicon, most desktop CPUs) costs
about the same for one row or five, while on a compute-bound CPU every row costs nearly a whole
step. Measured with the same kernels: on 2-vCPU VMs with Qwen2.5-Coder 0.5B a Zen 5 EPYC decoded
8 rows in 2.4x the time of one, a Zen 3 EPYC in 5.3x; on an H200, a 0.85B model, 5 rows of one
sequence took 1.7x one row and 16 rows 2.0x (BENCHMARKS.md). So the engine measures
instead of assuming: :class:`StepCost` keeps, for each row count, an exponentially weighted mean
of the ``llama_decode`` time of pure decode steps (no prompt tokens, which cost differently),
and fits ``seconds = fixed + per_row * rows`` over the row counts it has seen.

Owned by the engine thread.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_ROWS = 128      # row counts above this are not tracked (a step that large is not a decode step)
ALPHA = 0.2         # weight of a new sample in its row count's mean
MIN_SAMPLES = 3     # samples a row count needs (after its first, left out) before it joins the fit


@dataclass(frozen=True, slots=True)
class CostModel:
    """``seconds = fixed + per_row * rows`` for a decode step of ``rows`` rows."""

    fixed: float
    per_row: float

    def seconds(self, rows: float) -> float:
        return self.fixed + self.per_row * rows


class StepCost:
    def __init__(self) -> None:
        self._mean: dict[int, float] = {}
        self._count: dict[int, int] = {}

    def record(self, rows: int, seconds: float) -> None:
        """A pure decode step of ``rows`` rows took ``seconds`` (llama_decode until its results are
        ready). The first step of each size is left out: it builds that size's compute graph and,
        on a GPU, warms the kernels (measured on an H200: a cold 1-row mean flattened the slope)."""
        if not 0 < rows <= MAX_ROWS or seconds <= 0:
            return
        count = self._count.get(rows, 0)
        self._count[rows] = count + 1
        if count == 0:
            return
        mean = self._mean.get(rows)
        self._mean[rows] = seconds if mean is None else mean + ALPHA * (seconds - mean)

    def model(self) -> CostModel | None:
        """The least-squares line through the row counts seen at least :data:`MIN_SAMPLES` times,
        or None while fewer than two row counts qualify (nothing is known about the slope yet).

        The per-row cost is at least 0 and the fixed cost at least 0 (noise can tilt the line)."""
        points = [(rows, mean) for rows, mean in self._mean.items() if self._count[rows] > MIN_SAMPLES]
        if len(points) < 2:
            return None
        n = len(points)
        mean_x = sum(x for x, _ in points) / n
        mean_y = sum(y for _, y in points) / n
        sxx = sum((x - mean_x) ** 2 for x, _ in points)
        sxy = sum((x - mean_x) * (y - mean_y) for x, y in points)
        per_row = max(sxy / sxx, 0.0)
        fixed = max(mean_y - per_row * mean_x, 0.0)
        return CostModel(fixed, per_row)

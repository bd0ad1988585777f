"""What one more row costs a decode step, learned from the steps the engine runs.

Speculative decoding pays off only where a decode row is cheap next to the step: a step that
reads the weights once for every row (memory-bound: GPUs, Apple silicon, most desktop CPUs) costs
about the same for one row or five, while on a compute-bound CPU every row costs nearly a whole
step. Measured with the same kernels: on 2-vCPU VMs with Qwen2.5-Coder 0.5B a Zen 5 EPYC decoded
8 rows in 2.4x the time of one, a Zen 3 EPYC in 5.3x; on an H200, a 0.85B model, 5 rows of one
sequence took 1.7x one row and 16 rows 2.0x (BENCHMARKS.md).

A row also attends over every cell of its sequence, and that part grows with the depth: on a Zen 4
EPYC (2 vCPUs) one Qwen 0.5B row cost about 11 ms of weights and 40 ms of attention at a depth of
8k, so four draft rows that were cheap at the start of a chat cost four whole steps there. The
model is therefore ``seconds = fixed + per_row * rows + per_cell * cells``, ``cells`` being the
KV cells the step's rows attend in all (a row at position ``p`` attends ``p + 1``).

So the engine measures instead of assuming: :class:`StepCost` keeps, for each row count and depth
class (the power of two of the cells a row attends on average), an exponentially weighted mean of
the ``llama_decode`` time and the cells of pure decode steps (no prompt tokens, which cost
differently), and fits the model by least squares over those means. Where the depths seen do not
vary apart from the row count (one stream at one depth), the cells cannot be told from the rows and
the fit is ``fixed + per_row * rows`` at that depth. The model prices rows only up to the deepest
class it has seen (:meth:`CostModel.covers`): a deeper row is priced once its own steps are timed.

Owned by the engine thread.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MAX_ROWS = 128      # row counts above this are not tracked (a step that large is not a decode step)
ALPHA = 0.2         # weight of a new sample in its bucket's mean
MIN_SAMPLES = 3     # samples a bucket needs (after its row count's first, left out) before it joins the fit


@dataclass(frozen=True, slots=True)
class CostModel:
    """``seconds = fixed + per_row * rows + per_cell * cells`` for a decode step of ``rows`` rows
    attending ``cells`` KV cells in all; fitted on rows that attended fewer than ``depth`` cells."""

    fixed: float
    per_row: float
    per_cell: float = 0.0
    depth: float = math.inf

    def seconds(self, rows: float, cells: float = 0.0) -> float:
        return self.fixed + self.per_row * rows + self.per_cell * cells

    def row(self, position: int) -> float:
        """What one more row at ``position`` adds to a step."""
        return self.per_row + self.per_cell * (position + 1)

    def covers(self, position: int) -> bool:
        """Whether a row at ``position`` is as shallow as the rows the model was fitted on."""
        return position < self.depth


@dataclass(slots=True)
class _Mean:
    seconds: float
    cells: float
    count: int = 1

    def add(self, seconds: float, cells: float) -> None:
        self.seconds += ALPHA * (seconds - self.seconds)
        self.cells += ALPHA * (cells - self.cells)
        self.count += 1


def attended(position: int, rows: int) -> int:
    """The KV cells ``rows`` consecutive rows from ``position`` attend in all."""
    return rows * (position + 1) + rows * (rows - 1) // 2


def depth_class(rows: int, cells: float) -> int:
    """The power of two of the cells one of the step's rows attends on average."""
    return max(int(cells / rows), 1).bit_length() - 1


class StepCost:
    def __init__(self) -> None:
        self._means: dict[tuple[int, int], _Mean] = {}
        self._seen: set[int] = set()  # row counts timed at least once

    def record(self, rows: int, cells: int, seconds: float) -> None:
        """A pure decode step of ``rows`` rows attending ``cells`` KV cells took ``seconds``
        (llama_decode until its results are ready). The first step of each row count is left out:
        it builds that size's compute graph and, on a GPU, warms the kernels (measured on an H200:
        a cold 1-row mean flattened the slope)."""
        if not 0 < rows <= MAX_ROWS or seconds <= 0:
            return
        if rows not in self._seen:
            self._seen.add(rows)
            return
        key = (rows, depth_class(rows, cells))
        mean = self._means.get(key)
        if mean is None:
            self._means[key] = _Mean(seconds, float(cells))
        else:
            mean.add(seconds, cells)

    def model(self) -> CostModel | None:
        """The least-squares fit over the buckets seen at least :data:`MIN_SAMPLES` times, or None
        while fewer than two row counts qualify (nothing is known about the slope yet).

        Every coefficient is at least 0 (noise can tilt the fit): a negative one is dropped and the
        rest refitted."""
        points = [(rows, mean.cells, mean.seconds)
                  for (rows, _), mean in self._means.items() if mean.count >= MIN_SAMPLES]
        if len({rows for rows, _, _ in points}) < 2:
            return None
        classes = {depth_class(rows, cells) for rows, cells, _ in points}
        depth = float(1 << (max(classes) + 1))
        if len(classes) > 1:
            fit = _least_squares([(1.0, rows, cells) for rows, cells, _ in points], [s for *_, s in points])
            if fit is not None and min(fit[1:]) >= 0:
                return CostModel(max(fit[0], 0.0), fit[1], fit[2], depth)
        fixed, per_row = _line([(rows, s) for rows, _, s in points])
        return CostModel(fixed, per_row, 0.0, depth)


def _line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line, both at least 0."""
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    slope = max(sum((x - mean_x) * (y - mean_y) for x, y in points) / sxx, 0.0) if sxx else 0.0
    return max(mean_y - slope * mean_x, 0.0), slope


def _least_squares(xs: list[tuple[float, float, float]], ys: list[float]) -> tuple[float, float, float] | None:
    """The three coefficients minimising the squared error, or None where the columns are nearly
    dependent (the cells follow the rows): solved on columns scaled to unit size."""
    scale = [max(abs(x[k]) for x in xs) or 1.0 for k in range(3)]
    rows = [[x[k] / scale[k] for k in range(3)] for x in xs]
    a = [[sum(r[i] * r[j] for r in rows) for j in range(3)] for i in range(3)]
    b = [sum(r[i] * y for r, y in zip(rows, ys, strict=True)) for i in range(3)]
    solved = _solve3(a, b)
    if solved is None:
        return None
    return solved[0] / scale[0], solved[1] / scale[1], solved[2] / scale[2]


def _solve3(a: list[list[float]], b: list[float]) -> list[float] | None:
    """Gaussian elimination with partial pivoting; None for a (nearly) singular system."""
    m = [[*row, v] for row, v in zip(a, b, strict=True)]
    size = max(abs(v) for row in a for v in row) or 1.0
    for col in range(3):
        pivot = max(range(col, 3), key=lambda r: abs(m[r][col]))
        if abs(m[pivot][col]) < 1e-6 * size:
            return None
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(col + 1, 3):
            f = m[r][col] / m[col][col]
            for c in range(col, 4):
                m[r][c] -= f * m[col][c]
    out = [0.0, 0.0, 0.0]
    for r in (2, 1, 0):
        out[r] = (m[r][3] - sum(m[r][c] * out[c] for c in range(r + 1, 3))) / m[r][r]
    return out

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

import numpy as np

MAX_ROWS = 128      # row counts above this are not tracked (a step that large is not a decode step)
ALPHA = 0.2         # weight of a new sample in its bucket's mean
MIN_SAMPLES = 3     # samples a bucket needs (after its row count's first, left out) before it joins the fit
REFIT_EVERY = 32    # steps recorded between two fits (the means move slowly; a fit is ~50 us, a step can be 2 ms)


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
        self._fit: CostModel | None = None
        self._since_fit: int | None = None  # steps recorded since the fit; None: a bucket joined, fit again
        self._prompt: dict[int, float] = {}  # power-of-two class of rows -> mean seconds of steps with prompt tokens
        self._prompt_seen: set[int] = set()  # classes whose first step (left out) was timed

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
            mean = self._means[key] = _Mean(seconds, float(cells))
        else:
            mean.add(seconds, cells)
        if mean.count == MIN_SAMPLES:
            self._since_fit = None
        elif self._since_fit is not None:
            self._since_fit += 1

    def record_prompt(self, rows: int, seconds: float) -> None:
        """A step of ``rows`` rows holding prompt tokens took ``seconds`` (until its results were
        ready). Kept per power-of-two class of rows; the first step of each class is left out (it
        builds that size's graph)."""
        if rows <= 0 or seconds <= 0:
            return
        key = rows.bit_length()
        if key not in self._prompt_seen:
            self._prompt_seen.add(key)
            return
        last = self._prompt.get(key)
        self._prompt[key] = seconds if last is None else last + ALPHA * (seconds - last)

    def prompt_seconds(self, rows: int) -> float | None:
        """What steps with prompt tokens of about ``rows`` rows (the same power of two) took lately;
        None before one was timed. Decode rows price a prompt step badly on a small model: one more
        row beside one costs more than one more among sixty (a Zen 3 EPYC, a 2-layer model: the
        decode fit priced a 61-token prompt step at 7.2 ms; it took 2-3.6)."""
        return self._prompt.get(rows.bit_length()) if rows > 0 else None

    def prompt_token_seconds(self, rows: int) -> float | None:
        """What one prompt token costs a step of about ``rows`` prompt rows, on average (what
        recomputing a few cached tokens would add to it); None before such a step was timed."""
        seconds = self.prompt_seconds(rows)
        return None if seconds is None else seconds / rows

    def model(self) -> CostModel | None:
        """The least-squares fit over the buckets seen at least :data:`MIN_SAMPLES` times, or None
        while fewer than two row counts qualify (nothing is known about the slope yet).

        Every coefficient is at least 0 (noise can tilt the fit): a negative one is dropped and the
        rest refitted. Fitted again when a bucket joins, else every :data:`REFIT_EVERY` steps."""
        if self._since_fit is None or self._since_fit >= REFIT_EVERY:
            self._fit, self._since_fit = self._fitted(), 0
        return self._fit

    def _fitted(self) -> CostModel | None:
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
    a = np.array(xs)
    scale = np.abs(a).max(axis=0)
    scale[scale == 0] = 1.0
    coef, _, rank, _ = np.linalg.lstsq(a / scale, np.array(ys), rcond=1e-3)
    if rank < 3:
        return None
    fixed, per_row, per_cell = (float(c) for c in coef / scale)
    return fixed, per_row, per_cell

"""Who may use the shared KV pool: admitting waiting requests, and which running one yields.

The context's KV cells are one pool shared by every running request and the prefix cache
(kvcache.py). A request may grow up to its ``num_ctx``, but reserving that much for each would
let one 32k-token agent turn lock out every chat. So the pool is shared optimistically, as
vLLM does:

- **Admission** (:func:`fits`): a waiting request joins when the cells the pool can give it (free
  ones, plus cached ones no running request holds, which eviction frees) cover what the running
  requests still need (:func:`still_needs`: their unprefilled prompt and a short run of output,
  :data:`GROWTH_RESERVE`) plus its own. Otherwise it waits in the queue, whose order
  (interactive first) the batcher keeps; a running request's cells are never taken for it.
- **Preemption** (:func:`victim`): when the generating requests outgrow the pool anyway, the
  lowest-priority one (batch before interactive, then the most recently admitted) is paused: its
  cells go back to the prefix cache as an unlocked prefix, and it waits at the head of the queue
  to resume where it stopped, recomputing only what eviction took meanwhile. Its output is the
  same tokens it would have produced.

Every request the engine accepted fits an empty pool (``Engine.submit`` refuses a prompt of
``num_ctx`` tokens or more, and ``num_ctx`` never exceeds the pool), so the last running request
always fits and the queue always moves.

Pure functions over engine-thread state; nothing here touches llama.cpp.
"""

from __future__ import annotations

from collections.abc import Iterable

from .sequence import Sequence

GROWTH_RESERVE = 256  # output tokens admission keeps room for, per running request


def headroom(seq: Sequence) -> int:
    """Output cells reserved for ``seq``: up to :data:`GROWTH_RESERVE`, never past its limits."""
    left = seq.num_ctx - len(seq.tokens)
    if seq.num_predict is not None:
        left = min(left, seq.num_predict - seq.generated)
    return max(0, min(GROWTH_RESERVE, left))


def still_needs(seq: Sequence) -> int:
    """Cells a running ``seq`` will still add before its reserve is spent: the rest of its prompt
    (its ``prefill_end`` not yet computed, images at their cells) and its :func:`headroom`."""
    return max(0, seq.prefill_end - seq.n_past) + seq.extra_cells_from(seq.n_past) + headroom(seq)


def fits(seq: Sequence, cached: int, reclaimable: int, running: Iterable[Sequence]) -> bool:
    """Whether waiting ``seq``, whose first ``cached`` prompt tokens the prefix cache holds, can
    join now: ``reclaimable`` cells (free, or cached and unlocked) cover every running request's
    :func:`still_needs` and its own prompt beyond ``cached`` plus its :func:`headroom`.

    Always True with nothing running (module docstring: every accepted request fits an empty pool).
    """
    committed = [still_needs(s) for s in running]
    if not committed:
        return True
    need = max(0, seq.prefill_end - cached) + seq.extra_cells_from(cached) + headroom(seq)
    return need + sum(committed) <= reclaimable


def victim(running: Iterable[Sequence]) -> Sequence:
    """The running request to pause when the pool is full: batch work before interactive, then
    the most recently admitted (it has the least work to redo and waited least)."""
    return max(running, key=lambda s: (not s.interactive, s.t_admit))

"""One sequence's KV as llama.cpp serialises it: read out, and put back into a sequence id.

Used by the prefix cache in memory (:mod:`.kvcache`: offloading to host RAM, exporting a node)
and on disk (:mod:`.prefix_store`). Callers own the context and run on the engine thread.
"""

from __future__ import annotations

import ctypes

import llama_cpp as lc


class StateSizes:
    """How many bytes one context's sequence state of ``n`` cells takes, learned instead of asked.

    Why: ``llama_state_seq_get_size`` serialises the sequence to count its bytes, and finding the
    sequence's cells scans every cell of the context, as writing it does again: at 262,144 cells
    0.4 ms a call, paid for each prefix-cache move to host RAM (BENCHMARKS.md, 2026-11-29). For one
    context the size is linear in the cells written (headers, then per cell its position and ids and
    one K and one V row per layer: ``llama_kv_cache::state_write``), so two answers for different cell
    counts give the line and a third confirms it; from then on :meth:`bound` answers. A sliding-window
    model writes fewer cells than positions, so the line bounds its size from above, which is all a
    buffer needs. Memory whose state is not such a line (recurrent, hybrid) never confirms one, and a
    bound llama.cpp ever finds too small (it writes nothing then) ends the guessing for good.
    """

    def __init__(self) -> None:
        self._seen: tuple[int, int] | None = None  # (cells, size) of an earlier answer
        self._line: tuple[int, int] | None = None  # (bytes of headers, bytes per cell), once confirmed
        self._guess: tuple[int, int] | None = None  # a line from two answers, not yet confirmed
        self._off = False

    def bound(self, cells: int) -> int | None:
        """The size of a state of at most ``cells`` cells, or None: ask llama.cpp."""
        if self._line is None or self._off:
            return None
        fixed, per_cell = self._line
        return fixed + per_cell * cells

    def learn(self, cells: int, size: int) -> None:
        """llama.cpp's answer for a state of ``cells`` cells (``llama_state_seq_get_size``)."""
        if self._off or self._line is not None or cells <= 0:
            return
        if self._guess is not None:
            fixed, per_cell = self._guess
            if fixed + per_cell * cells == size:
                self._line = self._guess
                return
            self._guess = None  # not a line (or one sample was short): start again from this answer
        elif self._seen is not None and self._seen[0] != cells:
            (c0, s0), (c1, s1) = self._seen, (cells, size)
            per_cell, rest = divmod(s1 - s0, c1 - c0)
            if rest == 0 and per_cell > 0 and s0 - per_cell * c0 > 0:
                self._guess = (s0 - per_cell * c0, per_cell)
        self._seen = (cells, size)

    def too_small(self) -> None:
        """A bound was too small: ask from now on."""
        self._off = True


def state_of(ctx: lc.llama_context_p, seq_id: int, cells: int | None = None,
             sizes: StateSizes | None = None) -> bytearray:
    """``llama_state_seq_get_data`` of one sequence (written straight into the returned buffer).

    With ``sizes`` and ``cells`` (the most cells the sequence holds), the buffer's size comes from
    what ``sizes`` learned where it can (:class:`StateSizes`), else from llama.cpp, which teaches it.
    """
    bound = sizes.bound(cells) if sizes is not None and cells is not None else None
    if bound is not None:
        buf = _read(ctx, seq_id, bound)
        if buf:
            return buf
        assert sizes is not None
        sizes.too_small()  # llama.cpp logged the short buffer; ask from now on
    size = int(lc.llama_state_seq_get_size(ctx, seq_id))
    if sizes is not None and cells is not None:
        sizes.learn(cells, size)
    return _read(ctx, seq_id, size)


def _read(ctx: lc.llama_context_p, seq_id: int, size: int) -> bytearray:
    """The state in a buffer of ``size`` bytes, cut to what llama.cpp wrote (nothing when it did not fit)."""
    buf = bytearray(size)
    written = int(lc.llama_state_seq_get_data(ctx, (ctypes.c_uint8 * size).from_buffer(buf), size, seq_id))
    del buf[written:]
    return buf


def load_state(ctx: lc.llama_context_p, seq_id: int, blob: bytes | bytearray) -> bool:
    """``llama_state_seq_set_data`` into ``seq_id`` (replacing its cells); False when refused."""
    if not blob:
        return False
    if isinstance(blob, bytearray):  # no copy
        buf = (ctypes.c_uint8 * len(blob)).from_buffer(blob)
    else:
        buf = (ctypes.c_uint8 * len(blob)).from_buffer_copy(blob)
    return int(lc.llama_state_seq_set_data(ctx, buf, len(blob), seq_id)) > 0

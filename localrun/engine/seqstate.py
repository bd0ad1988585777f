"""One sequence's KV as llama.cpp serialises it: read out, and put back into a sequence id.

Used by the prefix cache in memory (:mod:`.kvcache`: offloading to host RAM, exporting a node)
and on disk (:mod:`.prefix_store`). Callers own the context and run on the engine thread.
"""

from __future__ import annotations

import ctypes

import llama_cpp as lc


def state_of(ctx: lc.llama_context_p, seq_id: int) -> bytearray:
    """``llama_state_seq_get_data`` of one sequence (written straight into the returned buffer)."""
    size = int(lc.llama_state_seq_get_size(ctx, seq_id))
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

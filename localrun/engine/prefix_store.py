"""The prefix cache on disk: saved when a model unloads, restored when it loads again.

One file per model digest and KV cache type (``<dir>/<digest>.<kv type>.kvc``). It holds the
prefix tree's nodes parent-first, then the host-RAM tier's segments (host_cache.py); each
record is a node's tokens and the KV of exactly its own positions ``[start, end)``, as
``llama_state_seq_get_data`` serialises them, so a long prefix shared by many cached prompts is
stored once. Restoring replays the records: a node's KV goes into a new sequence, which then
shares its parent's positions ``[0, start)`` with ``llama_memory_seq_cp`` (no copy of the cells),
and the node joins the tree through :meth:`KVCache.adopt`. Beyond what the context keeps idle
(``KVCache.resident_budget``), records go back to the host tier instead.

Checked before use: the file's header must name the same model digest, the same model file
(size and a hash of its first and last bytes), KV cache type and format version, and llama.cpp
refuses state of another shape (returns 0); anything else is a warning and an empty cache, never
a failed load. Files are written whole under a
temporary name and renamed. Runs on the engine thread before it starts serving (restore) or
after it stopped (save): nothing else touches the context then.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import llama_cpp as lc
import numpy as np

from .kvcache import KVCache

log = logging.getLogger(__name__)

MAGIC = b"LOCALRUN-PREFIX-CACHE\n"
VERSION = 2  # 2: tokens as int64 (an image's stand-ins are negative 63-bit ids: standins.py)
_RECORD = struct.Struct("<iiiQ")  # parent index (-1: root), start position, token count, KV bytes


@dataclass(frozen=True, slots=True)
class PrefixStore:
    """Where one model's prefix cache lives on disk and what it must match to be used.

    ``max_tokens``: at most this many cached positions are saved and restored (the engine
    passes half its cells, so a restored cache never crowds out running requests).
    """

    directory: Path
    model_digest: str
    model_fingerprint: str  # of the GGUF file itself (fingerprint()): a wrong digest cannot slip through
    kv_type: str
    max_tokens: int

    @property
    def path(self) -> Path:
        safe = self.model_digest.replace(":", "-").replace("/", "-")
        return self.directory / f"{safe}.{self.kv_type}.kvc"

    def header(self) -> dict[str, object]:
        return {"version": VERSION, "model_digest": self.model_digest, "model": self.model_fingerprint,
                "kv_type": self.kv_type}


def fingerprint(model_path: Path) -> str:
    """The file's size and a hash of its first and last 64 KiB (its header and last tensors):
    milliseconds, where hashing a whole GGUF takes seconds."""
    digest = hashlib.sha256()
    size = model_path.stat().st_size
    with model_path.open("rb") as f:
        digest.update(f.read(1 << 16))
        f.seek(max(0, size - (1 << 16)))
        digest.update(f.read(1 << 16))
    return f"{size}:{digest.hexdigest()[:32]}"


def save(store: PrefixStore, ctx: lc.llama_context_p, kv: KVCache) -> int:
    """Write the cached prefixes (the context's, most recently used first, up to ``max_tokens``,
    then the host tier's); returns the positions saved. An empty cache removes the file."""
    nodes = kv.export_order(store.max_tokens)
    segments = sorted(kv.host_segments(), key=lambda seg: seg.start)  # a parent before its children
    if not nodes and not segments:
        store.path.unlink(missing_ok=True)
        return 0
    store.directory.mkdir(parents=True, exist_ok=True)
    tmp = store.path.with_name(store.path.name + f".{os.getpid()}.tmp")
    index: dict[int, int] = {}
    by_path: dict[tuple[int, ...], int] = {}  # a record's whole token path -> its index
    written = 0  # records
    saved = 0
    with tmp.open("wb") as f:
        f.write(MAGIC + json.dumps(store.header()).encode() + b"\n")

        def record(parent_i: int, start: int, path: list[int], blob: bytes | bytearray) -> int:
            nonlocal saved, written
            by_path[tuple(path)] = written
            tokens = np.asarray(path[start:], dtype=np.int64).tobytes()
            f.write(_RECORD.pack(parent_i, start, len(path) - start, len(blob)) + tokens)
            f.write(blob)
            saved += len(path) - start
            written += 1
            return written - 1

        for node, parent in nodes:
            parent_i = -1 if parent is None else index.get(id(parent), -2)
            if parent_i == -2:  # its parent could not be saved: neither can it
                continue
            blob = kv.export_segment(ctx, node)
            if blob is None:
                continue
            index[id(node)] = record(parent_i, node.start, node.path(), blob)
        for seg in segments:
            parent_i = by_path.get(tuple(seg.path[: seg.start]), -2) if seg.start else -1
            if parent_i != -2:
                record(parent_i, seg.start, seg.path, seg.state)
    os.replace(tmp, store.path)
    log.info("prefix cache: saved %d positions to %s", saved, store.path)
    return saved


def restore(store: PrefixStore, ctx: lc.llama_context_p, kv: KVCache) -> int:
    """Load the saved prefixes into an empty ``kv``; returns the positions restored (0 when
    there is no usable file)."""
    path = store.path
    if not kv.enabled or not path.is_file():
        return 0
    try:
        data = path.read_bytes()
        if not data.startswith(MAGIC):
            raise ValueError("not a prefix cache file")
        end = data.index(b"\n", len(MAGIC))
        header = json.loads(data[len(MAGIC):end])
        if header != store.header():
            log.info("prefix cache: %s was written for another model or setting; not used", path)
            return 0
        return _replay(data, end + 1, store, ctx, kv)
    except (OSError, ValueError, struct.error) as exc:
        log.warning("prefix cache: %s is unreadable (%s); starting empty", path, exc)
        return 0


def _replay(data: bytes, pos: int, store: PrefixStore, ctx: lc.llama_context_p, kv: KVCache) -> int:
    # per record: its token path and where it went (True: the context, False: host RAM), None when dropped
    records: list[tuple[list[int], bool] | None] = []
    budget = min(store.max_tokens, kv.resident_budget())
    restored = 0
    while pos < len(data):
        parent, start, n_tokens, n_bytes = _RECORD.unpack_from(data, pos)
        pos += _RECORD.size
        tokens = np.frombuffer(data, dtype=np.int64, count=n_tokens, offset=pos).tolist()
        pos += 8 * n_tokens
        blob = data[pos:pos + n_bytes]
        pos += n_bytes
        if len(blob) != n_bytes:
            raise ValueError("truncated record")
        if parent >= len(records):
            raise ValueError("records out of order")
        above = records[parent] if parent >= 0 else ([], True)
        if above is None:
            records.append(None)
            continue
        prefix, resident = above
        if len(prefix) != start:
            raise ValueError("a record does not continue its parent")
        path = prefix + tokens
        if resident and restored + n_tokens <= budget and kv.adopt(ctx, path, start, blob):
            records.append((path, True))
            restored += n_tokens
        elif kv.keep_in_host(path, start, bytearray(blob)):
            records.append((path, False))
        else:
            records.append(None)
    log.info("prefix cache: restored %d positions from %s", restored, store.path)
    return restored

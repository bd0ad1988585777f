"""What a model's whole-vocabulary scans found, kept on disk beside its prefix cache between loads.

:class:`~.native.Vocab` lists a vocabulary's special tokens, its UTF-8 classes and its
end-of-generation ids by asking llama.cpp about every token, inside the first request that needs
each: 0.12-0.21 s, 0.48-0.52 s and 0.14-0.19 s for Qwen's 152k tokens on a 2-vCPU EPYC, the UTF-8
one on the engine thread, where every stream waits for it. A model unloaded after its keep-alive
and loaded again asked all over again. The answers depend on the file alone, so the engine saves
what was scanned when it unloads and adopts it when the same file loads again.

One file per model digest (``<dir>/<digest>.vocab.npz``, numpy arrays, no pickles). Used only when
its header names the same format, model file (``prefix_store.fingerprint``) and vocabulary size and
every id is in range; anything else is a warning and a scan on demand, never a failed load.
Written whole under a temporary name and renamed.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .native import SpecialToken, Vocab, VocabScans

log = logging.getLogger(__name__)

FORMAT = 1


@dataclass(frozen=True, slots=True)
class VocabStore:
    """Where one model's scans live on disk and what they must match to be used."""

    directory: Path
    model_digest: str
    model_fingerprint: str  # prefix_store.fingerprint() of the GGUF file

    @property
    def path(self) -> Path:
        safe = self.model_digest.replace(":", "-").replace("/", "-")
        return self.directory / f"{safe}.vocab.npz"

    def header(self, n_vocab: int) -> dict[str, object]:
        return {"format": FORMAT, "model_digest": self.model_digest, "model": self.model_fingerprint,
                "n_vocab": n_vocab}


def restore(store: VocabStore, vocab: Vocab) -> VocabScans:
    """Give ``vocab`` the scans saved for this model; returns what was adopted (all None: nothing)."""
    if not store.path.exists():
        return VocabScans()
    try:
        scans = _read(store, vocab.n_vocab)
    except Exception as exc:  # the file is data from outside: whatever is wrong with it, scan instead
        log.warning("vocabulary scans in %s not used: %s", store.path, exc)
        return VocabScans()
    vocab.adopt(scans)
    return scans


def save(store: VocabStore, vocab: Vocab, restored: VocabScans) -> bool:
    """Write what ``vocab`` has scanned when it knows more than was ``restored``; returns whether it wrote.
    Raises OSError (a full or read-only disk, a directory in the way) and leaves no temporary file."""
    scans = vocab.scans()
    if scans.known() <= restored.known():
        return False
    arrays: dict[str, np.ndarray] = {
        "header": np.frombuffer(json.dumps(store.header(vocab.n_vocab)).encode(), dtype=np.uint8)}
    if scans.specials is not None:
        ids = sorted(scans.specials)
        texts = [scans.specials[t].text for t in ids]
        arrays["special_ids"] = np.array(ids, dtype=np.int64)
        arrays["special_strips"] = np.array([scans.specials[t].strips for t in ids], dtype=np.bool_)
        arrays["special_lengths"] = np.array([len(t) for t in texts], dtype=np.int64)
        arrays["special_bytes"] = np.frombuffer(b"".join(texts), dtype=np.uint8)
    if scans.utf8 is not None:
        arrays["broken_utf8"] = np.asarray(scans.utf8[0], dtype=np.int64)
        arrays["continuation"] = np.array(scans.utf8[1], dtype=np.int64)
    if scans.eog is not None:
        arrays["eog"] = np.asarray(scans.eog, dtype=np.int64)
    store.directory.mkdir(parents=True, exist_ok=True)
    tmp = store.path.with_name(store.path.name + f".{os.getpid()}.tmp")
    try:
        with tmp.open("wb") as f:
            np.savez(f, allow_pickle=False, **arrays)
        os.replace(tmp, store.path)
    finally:
        tmp.unlink(missing_ok=True)  # written and renamed, or left half-written by a full disk: gone either way
    log.info("vocabulary scans saved to %s", store.path)
    return True


def _read(store: VocabStore, n_vocab: int) -> VocabScans:
    with np.load(store.path, allow_pickle=False) as data:
        header = json.loads(data["header"].tobytes())
        if header != store.header(n_vocab):
            raise ValueError(f"made for another model or format ({header})")
        arrays: dict[str, np.ndarray] = {name: data[name] for name in data.files}

    def ids(name: str) -> np.ndarray:
        values = arrays[name]
        if values.dtype != np.int64 or values.ndim != 1 or (values.size and not (
                values.min() >= 0 and values.max() < n_vocab)):
            raise ValueError(f"{name} holds ids outside the vocabulary")
        return values

    specials = None
    if "special_ids" in arrays:
        tokens, lengths, blob = ids("special_ids"), arrays["special_lengths"], arrays["special_bytes"].tobytes()
        strips = arrays["special_strips"]
        if not (len(tokens) == len(lengths) == len(strips)) or lengths.min(initial=0) < 0 \
                or int(lengths.sum()) != len(blob):
            raise ValueError("special tokens do not add up")
        ends = np.cumsum(lengths).tolist()
        starts = [0, *ends[:-1]]
        specials = {int(t): SpecialToken(blob[a:b], bool(s))
                    for t, a, b, s in zip(tokens.tolist(), starts, ends, strips.tolist(), strict=True)}
    utf8 = (ids("broken_utf8"), ids("continuation").tolist()) if "broken_utf8" in arrays else None
    eog = ids("eog") if "eog" in arrays else None
    return VocabScans(specials, utf8, eog)

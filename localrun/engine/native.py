"""Thin, typed wrappers over llama-cpp-python's low-level API: model, context, vocab, batch.

Everything that touches a raw ``llama_cpp`` pointer for loading and tokenising lives here, so
the engine loop reads in domain terms. Pitfalls handled here (see ENGINE_NOTES.md):
``use_extra_bufts`` only as ``LoadOptions.repack`` says (AMX buffers crash one VM), ``swa_full=True`` for sliding-
window models so that reused prefixes stay valid, ``n_seq_max`` covering every sequence id.

Thread-safety: the model and vocab are read-only after load, so tokenising and detokenising are
safe from any thread; a context belongs to the one thread that decodes on it.
"""

from __future__ import annotations

import codecs
import ctypes
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import llama_cpp as lc
import numpy as np

from ..errors import EngineError, InvalidModelFile
from . import rpc
from .types import MAX_UBATCH, LoadOptions

log = logging.getLogger(__name__)
T = TypeVar("T")

# Attention settings: flash attention on; K and V cached in F16 (the fast default), or K in BF16
# and V in F16 in the deterministic mode (LoadOptions.batch_invariant / kv_cache_type,
# engine.kv_type). Why the deterministic mode needs BF16 keys (measured on Gemma 3 270M, which
# turns a last-bit difference in one layer into up to ~1 logit; BENCHMARKS.md, Known limits):
# - Flash attention OFF reduces softmax and V*p over all cells of the unified cache in SIMD lanes
#   chosen by cell index, so a sequence's logits depend on where its cells sit; it is also slower
#   (every query pays for every cell of the unified cache, cached prefixes of others included).
# - Flash attention ON skips other sequences' (masked) cells. With an F16 K cache llama.cpp uses
#   its fast tiled kernel for prompt batches (a 1,300-token shared prefix: first token 0.52 s
#   against 0.75 s with BF16) and splits a 1-token batch over >= 512 cells across threads at
#   cell-index boundaries, so where a sequence's cells sit can still change its last bits.
# - With a BF16 K cache every batch takes the per-query path, walking a query's own cells in index
#   order with an online softmax: attention depends only on the sequence's own cells and their
#   order. The engine keeps each sequence's cells in position order by parking freed cells
#   until the cache is full, and clears it when idle after that (kvcache.py). V stays F16 in the
#   "bf16" setting: the per-query path then accumulates V*p in F16 directly instead of
#   converting every BF16 V row to F32, which made a 320-token step over a 1,300-token cached
#   prefix ~20 % faster (0.65-0.95 s against 0.84-1.35 s in 4 alternating pairs) and stays on
#   the same path for every batch size (mixed K/V types never take the tiled or split kernels).
# The other half is outside attention: for K-quant weights (Q4_K, Q6_K...) llama.cpp's CPU backend
# switches to a tiled matmul kernel once a batch holds 8 or more tokens, and it rounds differently
# from the per-row dot products used below 8, so a token decoded alone and the same token decoded
# among 7 others differed (Gemma 3's layer-0 attention-output matmul was the first tensor to
# change). use_batch_invariant_matmuls() turns the tiled kernel off (LoadOptions.batch_invariant).
FLASH_ATTN = lc.LLAMA_FLASH_ATTN_TYPE_AUTO
GGML_TYPE_F16 = 1  # ggml.h enum ggml_type (llama_cpp does not export these names)
GGML_TYPE_BF16 = 30
# LoadOptions.kv_cache_type -> (K type, V type); 2 bytes per value either way (hardware/memory.py)
KV_TYPES = {"f16": (GGML_TYPE_F16, GGML_TYPE_F16), "bf16": (GGML_TYPE_BF16, GGML_TYPE_F16)}
KV_CACHE_TYPES = ("auto", *KV_TYPES)


_init_lock = threading.Lock()
_initialised = False
_LOG_LEVELS = {2: logging.DEBUG, 3: logging.WARNING, 4: logging.ERROR}


# Lines of the model load in progress (set by load_model; loads run one at a time under _load_lock).
_load_capture: list[str] | None = None
_load_lock = threading.Lock()


def _forward_log(level: int, text: bytes, _user: object) -> None:
    line = text.decode("utf-8", "replace")
    if _load_capture is not None:
        _load_capture.append(line)
    if level >= 3:
        log.debug("llama.cpp: %s", line.rstrip())


_LOG_CALLBACK = lc.llama_log_callback(_forward_log)  # module-level: ctypes keeps no reference


def quiet_mtmd() -> None:
    """Route libmtmd's log (vision projectors: engine/vision.py) to DEBUG like llama.cpp's."""
    from llama_cpp import mtmd_cpp

    mtmd_cpp.mtmd_log_set(_LOG_CALLBACK, ctypes.c_void_p())
    mtmd_cpp.mtmd_helper_log_set(_LOG_CALLBACK, ctypes.c_void_p())


def init_backend() -> None:
    """Initialise llama.cpp once per process and route its log lines to DEBUG."""
    global _initialised
    with _init_lock:
        if not _initialised:
            lc.llama_log_set(_LOG_CALLBACK, ctypes.c_void_p())
            lc.llama_backend_init()
            _initialised = True


def use_batch_invariant_matmuls() -> None:
    """Have the CPU backend compute every matmul with its per-row kernels, whatever the batch size.

    llama.cpp reads ``GGML_CPU_TILED_MM`` once per process, at its first K-quant matmul, so this
    must run before the process decodes anything; the daemon runs one runner process per model.
    A value the user exported is kept. Measured on Gemma 3 270M Q4_K_M (2 cores): prompt
    processing about 15 % slower, decoding 8 sequences about 5 % faster (the tiled kernel does not
    pay off for 8-token batches here), 1 sequence unchanged (BENCHMARKS.md).
    """
    os.environ.setdefault("GGML_CPU_TILED_MM", "0")


def check_gguf(path: str) -> None:
    """Raise InvalidModelFile unless ``path`` is a readable file starting with the GGUF magic."""
    p = Path(path)
    if not p.is_file():
        raise InvalidModelFile(f"model file not found: {path}")
    with p.open("rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise InvalidModelFile(f"{p.name} is not a GGUF file")


last_load_log = ""  # llama.cpp's log of the last load_model call: where it placed each layer


def load_model(path: str, options: LoadOptions) -> lc.llama_model_p:
    """Load the weights; raises InvalidModelFile when llama.cpp rejects the file.

    Sets ``last_load_log`` to llama.cpp's own account of the load (layer placement, buffers).
    """
    check_gguf(path)
    init_backend()
    rpc.add_servers(options.rpc_servers)  # before the load: devices are chosen from those registered
    params = lc.llama_model_default_params()
    # repacked weight layouts (llama.cpp's default) only where the probe found them safe: AMX ones
    # SIGSEGV on a VM that advertises AMX it does not allow (ENGINE_NOTES.md, hardware/repack.py)
    params.use_extra_bufts = options.repack
    # use_mmap false (Ollama's option): read the weights into memory instead of mapping the file;
    # true leaves llama.cpp's auto mode (mmap where the device allows it). llama_model_params has no
    # use_mmap field since load_mode replaced it: ctypes would take the old name silently.
    if not options.use_mmap:
        params.load_mode = lc.LLAMA_LOAD_MODE_NONE
    if options.num_gpu is not None:
        params.n_gpu_layers = options.num_gpu
    params.main_gpu = options.main_gpu
    global _load_capture, last_load_log
    with _load_lock:
        _load_capture = []
        try:
            model: lc.llama_model_p = lc.llama_model_load_from_file(path.encode(), params)
        finally:
            last_load_log, _load_capture = "".join(_load_capture), None
    if not model:
        raise InvalidModelFile(f"llama.cpp could not load {Path(path).name} (truncated or unsupported GGUF)")
    return model


def meta(model: lc.llama_model_p, key: str) -> str | None:
    buf = ctypes.create_string_buffer(65536)
    n = lc.llama_model_meta_val_str(model, key.encode(), buf, len(buf))
    if n < 0:
        return None
    if n >= len(buf):
        buf = ctypes.create_string_buffer(n + 1)
        lc.llama_model_meta_val_str(model, key.encode(), buf, len(buf))
    return buf.value.decode("utf-8", "replace")


@dataclass(frozen=True, slots=True)
class ContextSpec:
    n_ctx: int
    n_seq_max: int
    n_batch: int
    n_threads: int
    swa_full: bool
    embeddings: bool = False
    pooling: int | None = None  # llama_pooling_type, None = the model's
    kv_type: str = "f16"  # a key of KV_TYPES
    backend_sampling: bool = False  # sampler chains in the graph (backend_sampler.py): one output row per sequence


def create_context(model: lc.llama_model_p, spec: ContextSpec) -> lc.llama_context_p:
    params = lc.llama_context_default_params()
    params.n_ctx = spec.n_ctx
    params.n_batch = spec.n_batch
    # Generation splits a step into physical batches of MAX_UBATCH (as llama-server's -ub 512);
    # pooled embeddings need each input inside one physical batch.
    params.n_ubatch = spec.n_batch if spec.embeddings else min(spec.n_batch, MAX_UBATCH)
    params.n_seq_max = spec.n_seq_max
    params.n_threads = params.n_threads_batch = spec.n_threads
    params.kv_unified = True
    params.swa_full = spec.swa_full
    params.flash_attn_type = FLASH_ATTN
    params.type_k, params.type_v = KV_TYPES[spec.kv_type]
    params.no_perf = True
    if spec.backend_sampling:  # llama.cpp's penalties run in the graph only so (backend_sampler.py)
        params.n_outputs_max_per_seq = 1
    if spec.embeddings:
        params.embeddings = True
        if spec.pooling is not None:
            params.pooling_type = spec.pooling
    ctx: lc.llama_context_p = lc.llama_init_from_model(model, params)
    if not ctx:
        raise EngineError(f"llama.cpp could not create a context of {spec.n_ctx} tokens "
                          f"for {spec.n_seq_max} sequences (out of memory?)")
    return ctx


_MATCHED_FIRST = lc.LLAMA_TOKEN_ATTR_CONTROL | lc.LLAMA_TOKEN_ATTR_USER_DEFINED | lc.LLAMA_TOKEN_ATTR_UNKNOWN
_STRIPS = lc.LLAMA_TOKEN_ATTR_LSTRIP | lc.LLAMA_TOKEN_ATTR_RSTRIP


@dataclass(frozen=True, slots=True)
class SpecialToken:
    """A token llama.cpp's tokenizer matches in the text first (``parse_special``)."""

    text: bytes
    strips: bool  # it eats the whitespace beside it (LSTRIP / RSTRIP)


@dataclass(frozen=True, slots=True)
class VocabScans:
    """What :class:`Vocab`'s whole-vocabulary scans found (None: not scanned); vocab_store.py keeps
    them between loads of a model."""

    specials: dict[int, SpecialToken] | None = None
    utf8: tuple[np.ndarray, list[int]] | None = None  # broken tokens, continuation tokens
    eog: np.ndarray | None = None

    def known(self) -> set[str]:
        """The names of the scans present."""
        return {name for name in ("specials", "utf8", "eog") if getattr(self, name) is not None}


class Vocab:
    """Tokenizer and token pieces of a loaded model (read-only, thread-safe)."""

    def __init__(self, model: lc.llama_model_p) -> None:
        self.ptr = lc.llama_model_get_vocab(model)
        self.n_vocab = int(lc.llama_vocab_n_tokens(self.ptr))
        self.bos = int(lc.llama_vocab_bos(self.ptr))
        self.eos = int(lc.llama_vocab_eos(self.ptr))
        self.add_bos = bool(lc.llama_vocab_get_add_bos(self.ptr))
        self.add_eos = bool(lc.llama_vocab_get_add_eos(self.ptr))
        self.sep = int(lc.llama_vocab_sep(self.ptr))
        self.add_sep = bool(lc.llama_vocab_get_add_sep(self.ptr))
        self._pieces: dict[int, bytes] = {}
        self._lock = threading.Lock()
        self._utf8_cache: tuple[np.ndarray, list[int]] | None = None
        self._eog_ids: np.ndarray | None = None
        self._specials: dict[int, SpecialToken] | None = None
        # Whole-vocabulary scans run once per model: the first caller computes, concurrent callers
        # wait for it. Eight requests each scanning 262k tokens at once held the GIL for ~1.5 s
        # and stalled the engine thread's decode loop (measured).
        self._scan_lock = threading.Lock()
        self._eog: dict[int, bool] = {t: True for t in (self.eos, int(lc.llama_vocab_eot(self.ptr))) if t >= 0}

    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = True) -> list[int]:
        data = text.encode("utf-8", "replace")
        capacity = len(data) + 16
        buf = (lc.llama_token * capacity)()
        n = lc.llama_tokenize(self.ptr, data, len(data), buf, capacity, add_special, parse_special)
        if n < 0:
            capacity = -n
            buf = (lc.llama_token * capacity)()
            n = lc.llama_tokenize(self.ptr, data, len(data), buf, capacity, add_special, parse_special)
        if n < 0:
            raise EngineError("tokenization failed")
        return list(buf[:n])

    def piece(self, token: int) -> bytes:
        """The bytes a token prints as; empty for control tokens (never printed)."""
        cached = self._pieces.get(token)
        if cached is not None:
            return cached
        buf = ctypes.create_string_buffer(64)
        n = lc.llama_token_to_piece(self.ptr, token, buf, len(buf), 0, False)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = lc.llama_token_to_piece(self.ptr, token, buf, len(buf), 0, False)
        piece = buf.raw[:max(n, 0)]
        with self._lock:
            self._pieces[token] = piece
        return piece

    def text_of(self, token: int, *, special: bool = True) -> str:
        """A token's text for display (logprobs): special tokens by name."""
        buf = ctypes.create_string_buffer(256)
        n = lc.llama_token_to_piece(self.ptr, token, buf, len(buf), 0, special)
        return buf.raw[:max(n, 0)].decode("utf-8", "replace")

    def detokenize(self, tokens: list[int]) -> str:
        return b"".join(self.piece(t) for t in tokens).decode("utf-8", "replace")

    def scans(self) -> VocabScans:
        """The whole-vocabulary scans run so far."""
        return VocabScans(self._specials, self._utf8_cache, self._eog_ids)

    def adopt(self, scans: VocabScans) -> None:
        """Take ``scans`` (of this same vocabulary, saved earlier) instead of scanning again."""
        with self._scan_lock:
            self._specials = self._specials if scans.specials is None else scans.specials
            self._utf8_cache = self._utf8_cache if scans.utf8 is None else scans.utf8
            self._eog_ids = self._eog_ids if scans.eog is None else scans.eog

    def _scan_once(self, attr: str, scan: Callable[[], T]) -> T:
        """The value cached in ``attr``, computed by ``scan`` on first use; concurrent first
        callers wait for that one scan instead of each running it."""
        cached: T | None = getattr(self, attr)
        if cached is None:
            with self._scan_lock:
                cached = getattr(self, attr)
                if cached is None:
                    cached = scan()
                    setattr(self, attr, cached)
        return cached

    def _utf8_classes(self) -> tuple[np.ndarray, list[int]]:
        return self._scan_once("_utf8_cache", self._scan_utf8)

    def _scan_utf8(self) -> tuple[np.ndarray, list[int]]:
        """Runs inside the first constrained sample its grammar refused, on the engine thread: Qwen's
        152k tokens take 0.48-0.52 s (0.68-1.28 s when each piece was asked alone and given a decoder)."""
        broken: list[int] = []
        continuation: list[int] = []
        decoder = codecs.getincrementaldecoder("utf-8")
        for token, piece in enumerate(self._all_pieces()):
            if piece.isascii():  # most pieces: whole characters
                continue
            if piece[0] & 0xC0 == 0x80:
                continuation.append(token)
            try:
                piece.decode("utf-8")
                continue
            except UnicodeDecodeError:  # broken, or whole characters and then a character's first bytes
                pass
            try:  # a leading continuation byte fails here too
                decoder("strict").decode(piece, final=False)
            except UnicodeDecodeError:
                broken.append(token)
        return np.array(broken, dtype=np.int64), continuation

    def _all_pieces(self) -> list[bytes]:
        """Every token's piece (as :meth:`piece`), asked through one buffer and remembered."""
        buf = ctypes.create_string_buffer(256)
        pieces: list[bytes] = []
        for token in range(self.n_vocab):
            n = lc.llama_token_to_piece(self.ptr, token, buf, len(buf), 0, False)
            pieces.append(buf.raw[:n] if n >= 0 else self.piece(token))  # longer: piece() sizes its buffer
        with self._lock:
            self._pieces.update(enumerate(pieces))
        return pieces

    def broken_utf8_tokens(self) -> np.ndarray:
        """Tokens whose bytes cannot follow a complete character (computed once, on demand)."""
        return self._utf8_classes()[0]

    def continuation_tokens(self) -> list[int]:
        """Tokens whose bytes start with a UTF-8 continuation byte."""
        return self._utf8_classes()[1]

    def eog_ids(self) -> np.ndarray:
        """Every end-of-generation token id (EOS, EOT, <|im_end|>...), computed once per model.

        llama.cpp has no call that lists them, so every id is asked (``llama_vocab_is_eog``), as its
        server does for ``ignore_eos``: about 0.1 s for a 262k vocabulary.
        """
        return self._scan_once(
            "_eog_ids", lambda: np.array([t for t in range(self.n_vocab) if lc.llama_vocab_is_eog(self.ptr, t)],
                                         dtype=np.int64))  # asked directly: is_eog keeps what it is asked

    def is_eog(self, token: int) -> bool:
        """Whether ``token`` ends generation; each id asks llama.cpp once (asked for every token
        sampled: a dict lookup is a tenth of the native call)."""
        known = self._eog.get(token)
        if known is None:
            known = self._eog[token] = bool(lc.llama_vocab_is_eog(self.ptr, token))
        return known

    def special_tokens(self) -> dict[int, SpecialToken]:
        """Every token the tokenizer matches in a text before it splits the rest into words (control
        and user-defined tokens, as llama.cpp lists them: ``<|im_start|>``, ``<tool_call>``..., and the
        unknown token), with its bytes; computed once per model (every id is asked: ~0.14 s for a
        152k vocabulary)."""
        return self._scan_once("_specials", self._scan_specials)

    def _scan_specials(self) -> dict[int, SpecialToken]:
        found: dict[int, SpecialToken] = {}
        for token in range(self.n_vocab):
            attr = int(lc.llama_vocab_get_attr(self.ptr, token))
            if attr & _MATCHED_FIRST:
                text = self.text_of(token, special=True).encode("utf-8", "replace")
                found[token] = SpecialToken(text, bool(attr & _STRIPS))
        return found

    def special_text(self, token: int) -> str:
        return self.text_of(token, special=True) if token >= 0 else ""


class Batch:
    """A llama_batch whose arrays are numpy arrays we own (filled with slice assignments).

    ``seq_id[i]`` points at ``_seq[i]``: one sequence per token, which is all the engine uses.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.token = np.zeros(capacity, dtype=np.int32)
        self.pos = np.zeros(capacity, dtype=np.int32)
        self.n_seq_id = np.ones(capacity, dtype=np.int32)
        self.seq = np.zeros(capacity, dtype=np.int32)
        self.logits = np.zeros(capacity, dtype=np.int8)
        base = self.seq.ctypes.data
        self._seq_ptrs = (ctypes.POINTER(ctypes.c_int32) * capacity)(
            *[ctypes.cast(base + 4 * i, ctypes.POINTER(ctypes.c_int32)) for i in range(capacity)]
        )
        # llama_cpp annotates llama_batch's pointer fields as ctypes Arrays; ctypes takes the pointers we
        # assign (the C struct holds pointers), hence the ignores.
        self.struct = lc.llama_batch()
        self.struct.token = self.token.ctypes.data_as(ctypes.POINTER(lc.llama_token))  # type: ignore[assignment]
        self.struct.embd = ctypes.POINTER(ctypes.c_float)()  # type: ignore[assignment]  # NULL: token input
        self.struct.pos = self.pos.ctypes.data_as(ctypes.POINTER(lc.llama_pos))  # type: ignore[assignment]
        self.struct.n_seq_id = self.n_seq_id.ctypes.data_as(  # type: ignore[assignment]
            ctypes.POINTER(ctypes.c_int32))
        self.struct.seq_id = ctypes.cast(  # type: ignore[assignment]
            self._seq_ptrs, ctypes.POINTER(ctypes.POINTER(lc.llama_seq_id)))
        self.struct.logits = self.logits.ctypes.data_as(ctypes.POINTER(ctypes.c_int8))  # type: ignore[assignment]
        self.n_tokens = 0

    def clear(self) -> None:
        self.n_tokens = 0

    def add(self, seq_id: int, start_pos: int, tokens: list[int], want_last_logits: bool) -> int:
        """Append ``tokens`` for ``seq_id`` at positions ``start_pos...``; returns the output row
        index of the last token (meaningful when ``want_last_logits``)."""
        n, end = self.n_tokens, self.n_tokens + len(tokens)
        self.token[n:end] = tokens
        self.pos[n:end] = np.arange(start_pos, start_pos + len(tokens), dtype=np.int32)
        self.seq[n:end] = seq_id
        self.logits[n:end] = 0
        if want_last_logits:
            self.logits[end - 1] = 1
        self.n_tokens = end
        return end - 1

    def add_all(self, seq_id: int, start_pos: int, tokens: list[int]) -> int:
        """Append ``tokens`` for ``seq_id`` at positions ``start_pos...``, each with an output row;
        returns the first row (the others follow it: row ``first + i`` is ``tokens[i]``'s)."""
        first = self.add(seq_id, start_pos, tokens, want_last_logits=False) - len(tokens) + 1
        self.logits[first: first + len(tokens)] = 1
        return first

    def add_one(self, seq_id: int, pos: int, token: int) -> int:
        n = self.n_tokens
        self.token[n] = token
        self.pos[n] = pos
        self.seq[n] = seq_id
        self.logits[n] = 1
        self.n_tokens = n + 1
        return n

    def decode(self, ctx: lc.llama_context_p) -> int:
        self.struct.n_tokens = self.n_tokens
        return int(lc.llama_decode(ctx, self.struct))

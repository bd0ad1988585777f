"""Images through libmtmd (llama.cpp's multimodal library), as typed values: the batcher's side of vision.

A :class:`Projector` is an mmproj file loaded for one language model. With it the engine turns image
bytes into a :class:`Bitmap` (:meth:`Projector.load_image`), a prompt text holding one
:attr:`Projector.marker` per image into text and image chunks (:meth:`Projector.tokenize`), and an
:class:`ImageChunk` into its embeddings (:meth:`Projector.encode`), which the caller decodes itself
in a ``llama_batch`` with ``embd`` set, at the positions :meth:`Projector.image_positions` gives.
Nothing here decodes on a llama context: the batcher owns the KV cache, libmtmd never touches it.

Ownership: every object that wraps a libmtmd pointer frees it in ``close()`` (also a context
manager); a closed object raises EngineError when used. Bitmaps may be closed as soon as
``tokenize`` returns (chunks copy the preprocessed pixels); an ImageChunk lives until it is encoded.

Threads: a Projector and everything it made belong to one thread at a time (the engine thread), as
a llama context does: ``encode`` writes the context's single output buffer, and nothing in libmtmd
locks. ctypes releases the GIL in every call.

Safety: ``load_image`` only hands libmtmd the formats its in-process decoder (stb_image) reads
(PNG, JPEG, GIF, BMP). Anything else would fall through to libmtmd's video path, which starts an
``ffmpeg`` subprocess when one is on PATH (WebP goes that way too). Pixel-count limits are checked
before this module (chat/images.py); stb_image allocates width x height x 3 bytes as the header says.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, Self, TypeVar

import llama_cpp as lc
import numpy as np
from llama_cpp import mtmd_cpp as mc

from ..errors import EngineError, InvalidModelFile, InvalidRequest

log = logging.getLogger(__name__)
P = TypeVar("P")

# stb_image's formats that libmtmd decodes in-process (TGA, PSD, HDR, PNM have weak or no magic: refused)
_DECODABLE = ((b"\x89PNG\r\n\x1a\n", "PNG"), (b"\xff\xd8\xff", "JPEG"), (b"GIF87a", "GIF"), (b"GIF89a", "GIF"),
              (b"BM", "BMP"))

_log_lock = threading.Lock()
_log_capture: list[str] | None = None  # libmtmd's lines during an init under _log_lock


def _forward_log(level: int, text: bytes, _user: object) -> None:
    line = text.decode("utf-8", "replace")
    capture = _log_capture
    if capture is not None:
        capture.append(line)
    log.debug("libmtmd: %s", line.rstrip())


_LOG_CALLBACK = lc.llama_log_callback(_forward_log)  # module-level: ctypes keeps no reference
_log_installed = False


def _install_log() -> None:
    global _log_installed
    if not _log_installed:
        mc.mtmd_helper_log_set(_LOG_CALLBACK, ctypes.c_void_p())  # also sets libmtmd's own logger
        _log_installed = True


def default_marker() -> str:
    """libmtmd's default media marker (``<__media__>``): where an image goes in a prompt's text."""
    return str(mc.mtmd_default_marker().decode())


class _Owned(Generic[P]):
    """A libmtmd pointer, freed once by ``close()``."""

    def __init__(self, ptr: P) -> None:
        self._ptr: P | None = ptr

    @property
    def ptr(self) -> P:
        if self._ptr is None:
            raise EngineError(f"{type(self).__name__} used after close()")
        return self._ptr

    def _release(self, ptr: P) -> None:
        raise NotImplementedError

    def close(self) -> None:
        if self._ptr is not None:
            ptr, self._ptr = self._ptr, None
            self._release(ptr)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Bitmap(_Owned[mc.mtmd_bitmap_p]):
    """Decoded RGB pixels of one image (mtmd_bitmap). ``id`` is the sha256 (hex) of the encoded bytes."""

    def _release(self, ptr: mc.mtmd_bitmap_p) -> None:
        mc.mtmd_bitmap_free(ptr)

    def __init__(self, ptr: mc.mtmd_bitmap_p) -> None:
        super().__init__(ptr)
        self.width = int(mc.mtmd_bitmap_get_nx(ptr))
        self.height = int(mc.mtmd_bitmap_get_ny(ptr))
        self.id = (mc.mtmd_bitmap_get_id(ptr) or b"").decode()


@dataclass(frozen=True, slots=True)
class TextChunk:
    """Token ids of a run of prompt text (special tokens parsed, BOS included when asked for)."""

    tokens: tuple[int, ...]

    @property
    def n_pos(self) -> int:
        return len(self.tokens)


class ImageChunk(_Owned[mc.mtmd_input_chunk_p]):
    """One image in a tokenized prompt; owns a copy of libmtmd's chunk (its preprocessed pixels).

    ``n_tokens``: embeddings it decodes as (batch entries); ``n_pos``: positions it advances the
    sequence by (equal to ``n_tokens`` except for M-RoPE models, where it is smaller); ``id``: the
    image's sha256, the same for the same bytes (a prefix cache key).
    """

    def _release(self, ptr: mc.mtmd_input_chunk_p) -> None:
        mc.mtmd_input_chunk_free(ptr)

    def __init__(self, ptr: mc.mtmd_input_chunk_p) -> None:
        super().__init__(ptr)
        self.n_tokens = int(mc.mtmd_input_chunk_get_n_tokens(ptr))
        self.n_pos = int(mc.mtmd_input_chunk_get_n_pos(ptr))
        self.id = (mc.mtmd_input_chunk_get_id(ptr) or b"").decode()


Chunk = TextChunk | ImageChunk


class Projector(_Owned[mc.mtmd_context_p]):
    """An mmproj loaded for one loaded language model (mtmd_context).

    ``model`` must outlive the projector. ``n_threads``: CPU threads for encoding images;
    ``use_gpu``: offload the vision encoder when llama.cpp was built with a GPU backend.
    Raises InvalidModelFile when libmtmd rejects the file (not an mmproj, or its output dimension
    differs from the model's n_embd); a malformed mmproj can also abort the process inside
    libmtmd (GGML_ASSERT), so load only files the store verified.
    """

    def _release(self, ptr: mc.mtmd_context_p) -> None:
        mc.mtmd_free(ptr)

    def __init__(self, path: str | Path, model: lc.llama_model_p, *, n_threads: int, use_gpu: bool = False,
                 warmup: bool = False) -> None:
        global _log_capture
        params = mc.mtmd_context_params_default()
        params.use_gpu = use_gpu
        params.n_threads = n_threads
        params.print_timings = False
        params.warmup = warmup
        with _log_lock:
            _install_log()
            _log_capture = []
            try:
                ptr = mc.mtmd_init_from_file(str(path).encode(), model, params)
            finally:
                lines, _log_capture = _log_capture, None
        if not ptr:
            errors = [ln.strip() for ln in lines if "error" in ln.lower() or "mismatch" in ln.lower()]
            detail = f": {errors[-1]}" if errors else ""
            raise InvalidModelFile(f"libmtmd could not load the projector {Path(path).name}{detail}")
        super().__init__(ptr)
        self._model = model
        self.n_embd = int(lc.llama_model_n_embd_inp(model))
        self.supports_vision = bool(mc.mtmd_support_vision(ptr))
        self.uses_mrope = bool(mc.mtmd_decode_use_mrope(ptr))
        self.marker = (mc.mtmd_get_marker(ptr) or mc.mtmd_default_marker()).decode()
        log.info("projector %s loaded (vision=%s, mrope=%s)", Path(path).name, self.supports_vision,
                 self.uses_mrope)

    def uses_non_causal(self, chunk: ImageChunk) -> bool:
        """Whether ``chunk``'s embeddings must be decoded with causal attention off (Gemma 3).

        Then the caller wraps their decode in ``llama_set_causal_attn(ctx, False)`` / ``True``, and all
        of the image must sit in one physical batch (n_ubatch >= ``chunk.n_tokens``).
        """
        return bool(mc.mtmd_decode_use_non_causal(self.ptr, chunk.ptr))

    def load_image(self, data: bytes) -> Bitmap:
        """Decode an encoded PNG, JPEG, GIF or BMP into a Bitmap whose id is the bytes' sha256.

        Raises InvalidRequest for another format (video and audio included) or bytes the decoder
        rejects (truncated or corrupt).
        """
        fmt = next((name for magic, name in _DECODABLE if data.startswith(magic)), None)
        if fmt is None:
            raise InvalidRequest("the image is not a PNG, JPEG, GIF or BMP file")
        buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        res = mc.mtmd_helper_bitmap_init_from_buf_wrapper(self.ptr, buf, len(data), False,
                                                          mc.mtmd_helper_init_opt_default())
        if res.video_ctx:  # unreachable for the formats above; a video context must not leak
            mc.mtmd_helper_video_free(res.video_ctx)
        if not res.bitmap or res.video_ctx:
            if res.bitmap:
                mc.mtmd_bitmap_free(res.bitmap)
            raise InvalidRequest(f"the {fmt} image could not be decoded (truncated or corrupt)")
        bitmap = Bitmap(res.bitmap)
        if mc.mtmd_bitmap_is_audio(res.bitmap):
            bitmap.close()
            raise InvalidRequest("expected an image, got audio")
        return bitmap

    def tokenize(self, text: str, images: list[Bitmap], *, add_special: bool = True,
                 parse_special: bool = True) -> list[Chunk]:
        """Split ``text`` at each :attr:`marker` and put ``images`` there, in order.

        ``add_special`` adds the model's BOS to the first text chunk; ``parse_special`` reads special
        tokens written in the text (a rendered chat template). Model-specific tokens around an image
        (``<start_of_image>``...) are added by libmtmd as text chunks. Raises InvalidRequest when the
        number of markers differs from ``len(images)``, EngineError when preprocessing fails.
        The images are not consumed: the caller still closes them.
        """
        n_markers = text.count(self.marker)
        if n_markers != len(images):  # checked here: libmtmd reports it as a preprocessing error (2), not 1
            raise InvalidRequest(f"the prompt has {n_markers} image marker(s) for {len(images)} image(s)")
        data = text.encode()
        inp = mc.mtmd_input_text(data, len(data), add_special, parse_special)
        ptrs = (mc.mtmd_bitmap_p_ctypes * max(len(images), 1))(*[b.ptr for b in images])
        chunks = mc.mtmd_input_chunks_init()
        if not chunks:
            raise EngineError("mtmd_input_chunks_init failed")
        try:
            res = mc.mtmd_tokenize(self.ptr, chunks, ctypes.byref(inp), ptrs, len(images))
            if res != 0:
                raise EngineError(f"libmtmd could not preprocess the image(s) (mtmd_tokenize returned {res})")
            return [self._chunk(mc.mtmd_input_chunks_get(chunks, i)) for i in range(mc.mtmd_input_chunks_size(chunks))]
        finally:
            mc.mtmd_input_chunks_free(chunks)

    def _chunk(self, ptr: mc.mtmd_input_chunk_p | None) -> Chunk:
        if not ptr:
            raise EngineError("libmtmd returned no chunk")
        kind = mc.mtmd_input_chunk_get_type(ptr)
        if kind == mc.MTMD_INPUT_CHUNK_TYPE_TEXT:
            n = ctypes.c_size_t()
            toks = mc.mtmd_input_chunk_get_tokens_text(ptr, ctypes.byref(n))
            return TextChunk(tuple(toks[i] for i in range(n.value)) if toks else ())
        if kind != mc.MTMD_INPUT_CHUNK_TYPE_IMAGE:
            raise EngineError(f"unexpected libmtmd chunk type {kind}")
        copy = mc.mtmd_input_chunk_copy(ptr)
        if not copy:
            raise EngineError("mtmd_input_chunk_copy failed")
        return ImageChunk(copy)

    def encode(self, chunk: ImageChunk) -> np.ndarray:
        """Run the vision encoder on ``chunk``: a new float32 array of shape (n_tokens, n_embd).

        The array is a copy (libmtmd's buffer is overwritten by the next encode). Raises EngineError
        when the encoder fails.
        """
        if mc.mtmd_encode_chunk(self.ptr, chunk.ptr) != 0:
            raise EngineError("libmtmd could not encode the image")
        out = mc.mtmd_get_output_embd(self.ptr)
        if not out:
            raise EngineError("libmtmd returned no embeddings")
        view = np.ctypeslib.as_array(out, shape=(chunk.n_tokens, self.n_embd))
        return np.array(view, dtype=np.float32, copy=True)

    def image_positions(self, chunk: ImageChunk, pos_0: int) -> np.ndarray:
        """The positions ``chunk``'s embeddings decode at when the image starts at ``pos_0``.

        Ordinary models: int32 ``pos_0 ... pos_0 + n_tokens - 1``, shape (n_tokens,). M-RoPE models:
        shape (4, n_tokens), section-major (t, y, x, z), as ``llama_batch.pos`` wants them for
        n_pos_per_embd = 4; the text after the image then starts at ``pos_0 + chunk.n_pos``.
        """
        if not self.uses_mrope:
            return np.arange(pos_0, pos_0 + chunk.n_tokens, dtype=np.int32)
        image = mc.mtmd_input_chunk_get_tokens_image(chunk.ptr)
        if not image:
            raise EngineError("the image chunk has no image tokens")
        out = np.empty((4, chunk.n_tokens), dtype=np.int32)
        for i in range(chunk.n_tokens):
            p = mc.mtmd_image_tokens_get_decoder_pos(image, pos_0, i)
            out[:, i] = (p.t, p.y, p.x, p.z)
        return out

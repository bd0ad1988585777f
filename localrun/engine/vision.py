"""Images in the engine: a vision model's projector (mmproj) through libmtmd.

A prompt with images arrives as text holding one :data:`IMAGE_MARKER` per image plus the images'
encoded bytes, in order. :meth:`Projector.tokenize` splits the text at the markers and hands libmtmd
the parts (``mtmd_tokenize_from_parts``: no marker is parsed out of the user's text), which gives
text tokens and one image chunk per image. The sequence's token list holds the text tokens and, for
each image position, a negative id derived from the image's sha256 (standins.py): never fed to
llama.cpp as a token, but the prefix cache's key for that image's cells, so a follow-up about the
same image reuses them and two different images never share cells.

The batcher (batcher.py) computes an :class:`ImageSpan` in two halves. :meth:`Projector.encode` runs
the vision encoder on a background thread (the running requests go on decoding meanwhile) and copies
the embeddings out; :meth:`Projector.decode` then puts them into the context at the span's positions
(``mtmd_helper_decode_image_chunk``: its own llama_decode calls, non-causal attention where the model
needs it, e.g. Gemma 3).

Positions are token indices, for images too: an image holds as many stand-ins in the token list as
the positions it advances, ``n_pos``. Most projectors place one embedding per position (``n_pos ==
n_tokens``). M-RoPE projectors (Qwen2-VL and later) do not: a grid of h x w embeddings sits in
h * w cells that all carry the image's first position (its height and width go into the other
rotary sections), and the text after it continues max(h, w) positions later. So the image's
stand-ins cover ``[start, start + n_pos)`` and every one of its cells has position ``start``:
the prefix cache's ranges of positions (copy, remove, save) take or leave the whole image, and a
cached path that ends with one holds cells up to position ``start`` only (kvcache.py). Usage
counts embeddings, as llama.cpp's server does (:attr:`ImageSpan.extra_cells`).
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import threading
import weakref
from dataclasses import dataclass, field

import llama_cpp as lc
from llama_cpp import mtmd_cpp as mtmd

from ..errors import EngineError, InvalidModelFile, InvalidRequest
from . import native
from .standins import image_ids

log = logging.getLogger(__name__)

IMAGE_MARKER = "<__media__>"
"""Where an image goes in the prompt text (the same string as ``localrun.chat.images.IMAGE_MARKER``)."""
_DECODABLE = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"GIF87a", b"GIF89a", b"BM")  # what stb_image reads
_NO_CALLBACK = mtmd.mtmd_helper_post_decode_callback()  # a NULL function pointer


@dataclass(eq=False)
class ImageSpan:
    """One image in a sequence's token list: ``tokens[start:start + n_pos]`` are its stand-ins and
    ``n_tokens`` its embeddings (the cells it takes: more than ``n_pos`` with M-RoPE, module docstring).

    ``embeddings`` is set by :meth:`Projector.encode` (engine-side, read only on the engine thread
    once ``ready`` is set) and dropped once the span's KV is computed.
    """

    start: int
    n_tokens: int
    digest: str
    chunk: mtmd.mtmd_input_chunk_p
    n_pos: int = 0  # 0: as many as n_tokens
    embeddings: ctypes.Array[ctypes.c_float] | None = None
    ready: threading.Event = field(default_factory=threading.Event)
    error: Exception | None = None
    pending: bool = False  # an encode has been asked for

    def __post_init__(self) -> None:
        self.n_pos = self.n_pos or self.n_tokens

    @property
    def end(self) -> int:
        return self.start + self.n_pos

    @property
    def extra_cells(self) -> int:
        """Cells beyond its positions (M-RoPE images); what usage and the pool count on top of them."""
        return self.n_tokens - self.n_pos


@dataclass(frozen=True, slots=True)
class MediaPrompt:
    """A prompt with images, tokenized: ``tokens`` (text ids and image stand-ins) and the image spans."""

    tokens: list[int]
    spans: tuple[ImageSpan, ...]

    @property
    def extra_cells(self) -> int:
        """Cells the images take beyond their positions (M-RoPE, module docstring)."""
        return sum(s.extra_cells for s in self.spans)

    def counted(self) -> list[int]:
        """``tokens`` with each image's stand-ins as many as its embeddings: what usage reports count."""
        if not self.extra_cells:
            return self.tokens
        out: list[int] = []
        at = 0
        for span in self.spans:
            out += self.tokens[at: span.start] + image_ids(span.digest, span.n_tokens)
            at = span.end
        return out + self.tokens[at:]


class Projector:
    """A loaded mmproj for one loaded model (``mtmd_init_from_file``); freed by :meth:`close`.

    ``tokenize`` may run on any thread; ``encode`` runs on the engine's encoder thread and ``decode``
    on the engine thread. Encodes take turns (libmtmd keeps one output buffer per context), and so
    do tokenizations, but a tokenization does not wait for an encode: a follow-up about a cached
    image is not held up by another request's new image.
    """

    def __init__(self, path: str, model: lc.llama_model_p, *, n_threads: int, use_gpu: bool) -> None:
        native.quiet_mtmd()
        params = mtmd.mtmd_context_params_default()
        params.use_gpu = use_gpu
        params.n_threads = n_threads
        params.print_timings = False
        params.warmup = False
        ctx = mtmd.mtmd_init_from_file(path.encode(), model, params)
        if not ctx:
            raise InvalidModelFile(f"the projector {path} could not be loaded (see the runner log): is it an "
                                   "mmproj GGUF made for this model?")
        self._ctx: mtmd.mtmd_context_p | None = ctx
        self._lock = threading.Lock()         # encode (and close)
        self._tokenize_lock = threading.Lock()
        # floats per embedding: the language model's input width, wider than n_embd where the projector also
        # feeds later layers (Qwen3-VL's deepstack); what libmtmd writes and mtmd_helper_decode reads
        self.n_embd = int(lc.llama_model_n_embd_inp(model))
        try:
            if not mtmd.mtmd_support_vision(ctx):
                raise InvalidModelFile(f"the projector {path} has no vision encoder (an audio projector?)")
        except BaseException:
            self.close()
            raise

    def tokenize(self, text: str, images: list[bytes], *, add_special: bool) -> MediaPrompt:
        """``text`` with one :data:`IMAGE_MARKER` per image of ``images`` (in order) as tokens and spans.

        InvalidRequest when the markers and images do not match, or an image cannot be decoded.
        """
        pieces = text.split(IMAGE_MARKER)
        if len(pieces) - 1 != len(images):
            raise InvalidRequest(f"the prompt has {len(pieces) - 1} image places for {len(images)} images (a "
                                 "chat template that drops messages with images, or the marker "
                                 f"{IMAGE_MARKER} in the text)")
        ctx = self._live()
        with self._tokenize_lock:
            bitmaps = [self._bitmap(ctx, data, i) for i, data in enumerate(images)]
            try:
                return self._tokenize(ctx, pieces, bitmaps, images, add_special)
            finally:
                for bitmap in bitmaps:
                    mtmd.mtmd_bitmap_free(bitmap)

    def encode(self, span: ImageSpan) -> None:
        """Run the vision encoder on ``span`` and keep its embeddings (n_tokens x n_embd floats);
        sets ``span.ready`` (with ``span.error`` on failure)."""
        try:
            ctx = self._live()
            with self._lock:
                if mtmd.mtmd_encode_chunk(ctx, span.chunk) != 0:
                    raise EngineError("the vision encoder failed on an image")
                out = mtmd.mtmd_get_output_embd(ctx)
                count = span.n_tokens * self.n_embd
                embeddings = (ctypes.c_float * count)()
                ctypes.memmove(embeddings, out, count * ctypes.sizeof(ctypes.c_float))
            span.embeddings = embeddings
        except Exception as exc:  # delivered to the request on the engine thread
            span.error = exc
        finally:
            span.ready.set()

    def decode(self, lctx: lc.llama_context_p, span: ImageSpan, seq_id: int, n_batch: int) -> bool:
        """Put ``span``'s embeddings into ``lctx`` at positions ``span.start`` onwards for ``seq_id``
        (with M-RoPE all of them at ``span.start``, module docstring). False when llama.cpp found no
        room in the KV cache."""
        assert span.embeddings is not None
        new_n_past = lc.llama_pos(0)
        rc = mtmd.mtmd_helper_decode_image_chunk(
            self._live(), lctx, span.chunk, span.embeddings, span.start, seq_id, n_batch,
            ctypes.byref(new_n_past), _NO_CALLBACK, None)
        if rc == 1:
            return False
        if rc != 0:
            raise EngineError(f"decoding an image failed ({rc})")
        if new_n_past.value != span.end:  # the stand-ins were counted from the same chunk: never
            raise EngineError(f"an image advanced {new_n_past.value - span.start} positions, not {span.n_pos}")
        span.embeddings = None
        return True

    def close(self) -> None:
        with self._lock, self._tokenize_lock:
            ctx, self._ctx = self._ctx, None
        if ctx:
            mtmd.mtmd_free(ctx)

    def _live(self) -> mtmd.mtmd_context_p:
        if self._ctx is None:
            raise EngineError("the model is unloaded")
        return self._ctx

    def _bitmap(self, ctx: mtmd.mtmd_context_p, data: bytes, index: int) -> mtmd.mtmd_bitmap_p:
        if not data.startswith(_DECODABLE):  # anything else would reach libmtmd's ffmpeg fallback
            raise InvalidRequest(f"image {index + 1} is not a PNG, JPEG, GIF or BMP image")
        buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        bitmap = mtmd.mtmd_helper_bitmap_init_from_buf(ctx, buf, len(data), False)
        if not bitmap:
            raise InvalidRequest(f"image {index + 1} could not be decoded (a corrupt or unsupported image)")
        mtmd.mtmd_bitmap_set_id(bitmap, hashlib.sha256(data).hexdigest().encode())
        return bitmap

    def _tokenize(self, ctx: mtmd.mtmd_context_p, pieces: list[str], bitmaps: list[mtmd.mtmd_bitmap_p],
                  images: list[bytes], add_special: bool) -> MediaPrompt:
        texts = [mtmd.mtmd_input_text(p.encode(), len(p.encode()), add_special, True) for p in pieces]
        parts: list[mtmd.mtmd_input_part] = []
        for i, text in enumerate(texts):
            if pieces[i]:
                parts.append(mtmd.mtmd_input_part(ctypes.pointer(text), None))
            if i < len(bitmaps):
                parts.append(mtmd.mtmd_input_part(None, bitmaps[i]))
        array = (ctypes.POINTER(mtmd.mtmd_input_part) * len(parts))(*[ctypes.pointer(p) for p in parts])
        chunks = mtmd.mtmd_input_chunks_init()
        try:
            rc = mtmd.mtmd_tokenize_from_parts(ctx, chunks, array, len(parts), add_special)
            if rc != 0:
                raise InvalidRequest(f"the images could not be prepared for the model ({rc})")
            tokens: list[int] = []
            spans: list[ImageSpan] = []
            image = 0
            for c in range(mtmd.mtmd_input_chunks_size(chunks)):
                chunk = mtmd.mtmd_input_chunks_get(chunks, c)
                kind = mtmd.mtmd_input_chunk_get_type(chunk)
                if kind == mtmd.MTMD_INPUT_CHUNK_TYPE_TEXT:
                    n = ctypes.c_size_t(0)
                    ids = mtmd.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
                    tokens.extend(int(ids[k]) for k in range(n.value))
                    continue
                if kind != mtmd.MTMD_INPUT_CHUNK_TYPE_IMAGE:
                    raise InvalidRequest("only images are supported as media")
                n_tokens = int(mtmd.mtmd_input_chunk_get_n_tokens(chunk))
                n_pos = int(mtmd.mtmd_input_chunk_get_n_pos(chunk))
                digest = hashlib.sha256(images[image]).hexdigest()
                image += 1
                copy = mtmd.mtmd_input_chunk_copy(chunk)
                span = ImageSpan(len(tokens), n_tokens, digest, copy, n_pos)
                weakref.finalize(span, mtmd.mtmd_input_chunk_free, copy)
                spans.append(span)
                tokens.extend(image_ids(digest, n_pos))
            return MediaPrompt(tokens, tuple(spans))
        finally:
            mtmd.mtmd_input_chunks_free(chunks)

"""Images in a chat turn: where they sit in the prompt, and what is checked before anything decodes them.

Every API carries images its own way (Ollama's base64 ``images``, OpenAI's ``image_url`` data URLs,
Anthropic's ``image`` blocks, Responses' ``input_image``); each adapter turns them into
:class:`Image` values with :func:`from_base64` / :func:`from_data_url`, and puts
:data:`IMAGE_MARKER` in the message text where the image goes. The rendered prompt then holds one
marker per image, in order, and the engine replaces each marker with the image's tokens (libmtmd's
default media marker: ``engine/vision.py`` checks that the two agree).

An image is hostile input until proven otherwise, so this module decides from the bytes alone,
without decoding pixels: the format from its magic bytes (PNG, JPEG, GIF, BMP: what libmtmd's
decoder reads; WebP and the rest would reach its ffmpeg fallback, so they are refused), its width and
height from its header, and it refuses (400, naming where the image was) invalid base64, what is
not an image, a truncated header, more than :data:`MAX_PIXELS` pixels (a decompression bomb of a
few KB declares 60,000 x 60,000), more than :data:`MAX_IMAGE_BYTES` bytes, and more than
:data:`MAX_IMAGES` images or :data:`MAX_REQUEST_BYTES` of them in one request. Pure Python: no
aiohttp, no llama_cpp.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from ..errors import InvalidRequest
from ..jsontypes import JSONMapping, JSONObject

IMAGE_MARKER = "<__media__>"
"""Where an image goes in the prompt text (libmtmd's default media marker)."""
MAX_IMAGES = 16                  # images in one request (every message together)
MAX_IMAGE_BYTES = 20 << 20       # encoded bytes of one image (OpenAI's and Anthropic's limit is 20 MB / 5 MB)
MAX_PIXELS = 50_000_000          # width x height of one image, read from its header before decoding
MAX_SIDE = 16_384                # pixels on either side
MAX_REQUEST_BYTES = 64 << 20    # encoded bytes of all a request's images

_DATA_URL = re.compile(r"data:(?P<mime>[\w.+-]+/[\w.+-]+)?(?:;[\w-]+=[^;,]*)*;base64,")


@dataclass(frozen=True, slots=True)
class Image:
    """One checked image: its encoded bytes (as sent), format and size from its header, and the
    base64 text it came as (empty when it came as bytes)."""

    data: bytes
    format: str    # "png", "jpeg", "gif" or "bmp"
    width: int
    height: int
    base64: str = field(default="", compare=False, repr=False)

    @property
    def digest(self) -> str:
        """sha256 of the bytes: the prefix cache's key for this image's tokens."""
        return hashlib.sha256(self.data).hexdigest()

    def as_base64(self) -> str:
        """The image as base64 text that :func:`from_base64` reads back without decoding it again."""
        text = Base64Image(self.base64 or base64.b64encode(self.data).decode("ascii"))
        text.image = self
        return text


class Base64Image(str):
    """The base64 text of a checked :class:`Image`, as an adapter puts it in a native message's
    ``images``: still a plain string to JSON and templates, and :func:`from_base64` takes its image
    as it is, so an image is decoded and checked once a request (a 150 KB PNG: 0.5 ms each time)."""

    image: Image


def from_base64(value: object, where: str) -> Image:
    """A base64 string (Ollama's ``images`` item, Anthropic's ``source.data``) checked as an image."""
    if isinstance(value, Base64Image):
        return value.image
    if not isinstance(value, str):
        raise InvalidRequest(f"{where} must be a base64-encoded image (a string)")
    if value.startswith("data:"):
        return from_data_url(value, where)
    if len(value) > MAX_IMAGE_BYTES * 4 // 3 + 4:
        raise InvalidRequest(f"{where} is larger than {MAX_IMAGE_BYTES >> 20} MB")
    text = value.strip()
    try:  # strict: what b64decode(validate=True) refuses, at half its cost (no regular expression first)
        data = binascii.a2b_base64(text, strict_mode=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest(f"{where} is not valid base64") from None
    return replace(check(data, where), base64=text)


def from_list(value: object, where: str) -> list[Image]:
    """Ollama's ``images`` field: a list of base64 images (missing or null: none)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidRequest(f"{where} must be a list of base64-encoded images")
    return [from_base64(item, f"{where}[{i}]") for i, item in enumerate(value)]


def from_data_url(url: object, where: str) -> Image:
    """A ``data:image/...;base64,...`` URL checked as an image. Any other URL is refused: nothing
    is fetched from the network (the message says so)."""
    if not isinstance(url, str):
        raise InvalidRequest(f"{where} must be a data URL (data:image/png;base64,...)")
    if not url.startswith("data:"):
        shown = url if len(url) <= 80 else url[:77] + "..."
        raise InvalidRequest(f"{where}: localrun does not fetch images from the network ({shown!r}); send the "
                             "image itself as a base64 data URL (data:image/png;base64,...)")
    head, sep, payload = url.partition(",")
    match = _DATA_URL.fullmatch(head + sep)
    if match is None:
        raise InvalidRequest(f"{where} must be a base64 data URL (data:image/png;base64,...)")
    mime = match["mime"] or ""
    if mime and not mime.startswith("image/"):
        raise InvalidRequest(f"{where} is {mime}, not an image")
    return from_base64(payload, where)


def check(data: bytes, where: str) -> Image:
    """``data`` as an :class:`Image`, or a 400 saying why it is not one this daemon will decode."""
    if not data:
        raise InvalidRequest(f"{where} is empty")
    if len(data) > MAX_IMAGE_BYTES:
        raise InvalidRequest(f"{where} is larger than {MAX_IMAGE_BYTES >> 20} MB")
    kind = _sniff(data)
    if kind is None:
        raise InvalidRequest(f"{where} is not an image localrun reads (PNG, JPEG, GIF or BMP)")
    size = _SIZES[kind](data)
    if size is None:
        raise InvalidRequest(f"{where} is not a valid {kind.upper()} image (its header is cut or malformed)")
    width, height = size
    if width <= 0 or height <= 0:
        raise InvalidRequest(f"{where} has no pixels ({width} x {height})")
    if width > MAX_SIDE or height > MAX_SIDE or width * height > MAX_PIXELS:
        raise InvalidRequest(f"{where} is {width} x {height} pixels; localrun reads images of at most "
                             f"{MAX_SIDE} pixels a side and {MAX_PIXELS // 1_000_000} megapixels")
    return Image(data, kind, width, height)


class Content:
    """One message's content built from an API's parts in order: text, and images where they stand
    (each becomes :data:`IMAGE_MARKER`). :meth:`fields` is the native message's ``content`` (and
    ``images``); ``sep`` joins the text pieces."""

    def __init__(self, sep: str = "") -> None:
        self._pieces: list[str] = []
        self._images: list[Image] = []
        self._sep = sep

    def text(self, text: str, where: str) -> None:
        refuse_marker(text, where)
        self._pieces.append(text)

    def image(self, image: Image) -> None:
        self._pieces.append(IMAGE_MARKER)
        self._images.append(image)

    def __bool__(self) -> bool:
        return bool(self._pieces)

    def fields(self) -> JSONObject:
        content = ""
        for i, piece in enumerate(self._pieces):  # no separator next to an image: it stands where it was
            if i and piece != IMAGE_MARKER and self._pieces[i - 1] != IMAGE_MARKER:
                content += self._sep
            content += piece
        if not self._images:
            return {"content": content}
        return {"content": content, "images": [image.as_base64() for image in self._images]}


def attach(text: str, images: Sequence[Image], where: str) -> JSONObject:
    """A native message's ``content`` and ``images`` for ``text`` with ``images`` before it (as
    Ollama's ``images`` field means them): one :data:`IMAGE_MARKER` per image, then the text.
    Text that holds the marker itself is refused (it would take an image's place)."""
    built = Content()
    for image in images:
        built.image(image)
    built.text(text, where)
    return built.fields()


def refuse_marker(text: str, where: str) -> None:
    """A 400 when a client's ``text`` holds :data:`IMAGE_MARKER` (only localrun places it)."""
    if IMAGE_MARKER in text:
        raise InvalidRequest(f"{where} contains {IMAGE_MARKER}, which localrun reserves for images")


def parts(message: JSONMapping) -> list[str | Image]:
    """A native message's content as it was sent: text pieces and the images where they stood (for
    an upstream that takes images in its own shape)."""
    pictures = [from_base64(p, "an image") for p in _list(message.get("images"))]
    content = message.get("content")
    pieces = (content if isinstance(content, str) else "").split(IMAGE_MARKER)
    out: list[str | Image] = []
    for i, piece in enumerate(pieces):
        if piece:
            out.append(piece)
        if i < len(pieces) - 1 and i < len(pictures):
            out.append(pictures[i])
    return out


def without_markers(message: JSONMapping) -> dict[str, object]:
    """A native message as Ollama's API takes it: its images in ``images``, none of our markers in the text."""
    out = dict(message)
    content = message.get("content")
    if isinstance(content, str):
        out["content"] = content.replace(IMAGE_MARKER, "")
    return out


def data_url(image: Image) -> str:
    """``image`` as a ``data:`` URL (OpenAI's ``image_url``)."""
    return f"data:image/{image.format};base64,{image.as_base64()}"


def of_messages(messages: Sequence[JSONObject]) -> tuple[bytes, ...]:
    """Every image of ``messages`` (native, after :func:`attach`), in prompt order, checked in all
    (:func:`check_request`)."""
    found = [from_base64(p, "an image") for m in messages for p in _list(m.get("images"))]
    check_request(found)
    return tuple(image.data for image in found)


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def check_request(images: Sequence[Image]) -> None:
    """A request's images, all messages together: at most :data:`MAX_IMAGES`, and at most
    :data:`MAX_REQUEST_BYTES` in all (they cross to the model's runner in one message)."""
    if len(images) > MAX_IMAGES:
        raise InvalidRequest(f"the request has {len(images)} images; localrun reads at most {MAX_IMAGES} in one "
                             "request")
    total = sum(len(image.data) for image in images)
    if total > MAX_REQUEST_BYTES:
        raise InvalidRequest(f"the request's images are {total / (1 << 20):.0f} MB in all; localrun reads at most "
                             f"{MAX_REQUEST_BYTES >> 20} MB of images in one request")


def _sniff(data: bytes) -> str | None:
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if data.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "gif"
    if data.startswith(b"BM"):
        return "bmp"
    return None


def _png_size(data: bytes) -> tuple[int, int] | None:
    if len(data) < 33 or data[12:16] != b"IHDR":
        return None
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    """Width and height from the first start-of-frame segment (SOF0-SOF15 but DHT, JPG, DAC)."""
    i = 2
    while i + 4 <= len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # no length
            i += 2
            continue
        length = int.from_bytes(data[i + 2:i + 4], "big")
        if length < 2:
            return None
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            if i + 9 > len(data):
                return None
            height, width = struct.unpack(">HH", data[i + 5:i + 9])
            return int(width), int(height)
        if marker == 0xD9:  # end of image before any frame
            return None
        i += 2 + length
    return None


def _gif_size(data: bytes) -> tuple[int, int] | None:
    if len(data) < 13:
        return None
    width, height = struct.unpack("<HH", data[6:10])
    return int(width), int(height)


def _bmp_size(data: bytes) -> tuple[int, int] | None:
    if len(data) < 26:
        return None
    header = int.from_bytes(data[14:18], "little")
    if header == 12:
        width, height = struct.unpack("<HH", data[18:22])
        return int(width), int(height)
    width, height = struct.unpack("<ii", data[18:26])
    return int(width), abs(int(height))


_SIZES = {"png": _png_size, "jpeg": _jpeg_size, "gif": _gif_size, "bmp": _bmp_size}

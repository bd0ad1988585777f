"""Images are checked from their bytes before anything decodes them: format, size, count (issue #28 point 6)."""

from __future__ import annotations

import base64
import struct
import zlib

import pytest

from localrun.chat import images
from localrun.errors import InvalidRequest


def png(width: int, height: int, *, truncate: bool = False) -> bytes:
    """A valid greyscale PNG (or one cut after its header)."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    header = chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
    if truncate:
        return b"\x89PNG\r\n\x1a\n" + header[:10]
    rows = b"".join(b"\x00" + bytes(width) for _ in range(height))
    return b"\x89PNG\r\n\x1a\n" + header + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def bomb_png(width: int, height: int) -> bytes:
    """A few hundred bytes declaring a huge image (its pixel data is never looked at)."""
    head = png(1, 1)
    return head[:16] + struct.pack(">II", width, height) + head[24:]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_a_png_is_read_from_base64_and_from_a_data_url() -> None:
    image = images.from_base64(b64(png(3, 2)), "images[0]")
    assert (image.format, image.width, image.height) == ("png", 3, 2)
    assert images.from_data_url("data:image/png;base64," + b64(png(3, 2)), "x") == image
    assert len(image.digest) == 64 and image.as_base64() == b64(png(3, 2))


def test_an_image_an_adapter_read_is_not_decoded_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """OpenAI's data URL -> the native message's base64 -> the request's images: one decode, not two."""
    decodes: list[int] = []
    real = images.binascii.a2b_base64
    monkeypatch.setattr(images.binascii, "a2b_base64", lambda *a, **k: decodes.append(1) or real(*a, **k))
    image = images.from_data_url("data:image/png;base64," + b64(png(3, 2)), "x")
    native = images.attach("what is this?", [image], "prompt")
    assert native["images"] == [b64(png(3, 2))]
    assert images.of_messages([native]) == (png(3, 2),) and decodes == [1]


def test_jpeg_gif_and_bmp_headers_give_their_size() -> None:
    sof = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00" \
          b"\xff\xc0\x00\x11\x08\x00\x20\x00\x40\x03\x01\x22\x00\x02\x11\x01\x03\x11\x01\xff\xd9"
    assert (images.check(sof, "j").width, images.check(sof, "j").height) == (64, 32)
    gif = b"GIF89a" + struct.pack("<HH", 5, 7) + b"\x00\x00\x00" + b";"
    assert (images.check(gif, "g").width, images.check(gif, "g").height) == (5, 7)
    bmp = b"BM" + bytes(12) + struct.pack("<Iii", 40, 4, -6) + bytes(28)
    assert (images.check(bmp, "b").width, images.check(bmp, "b").height) == (4, 6)


@pytest.mark.parametrize(("value", "says"), [
    ("not base64!!", "not valid base64"),
    (b64(b"hello, I am text"), "not an image"),
    (b64(b"RIFF\x1e\x00\x00\x00WEBPVP8X" + bytes(18)), "PNG, JPEG, GIF or BMP"),  # libmtmd would call ffmpeg
    (b64(png(4, 4, truncate=True)), "header is cut"),
    (b64(bomb_png(60_000, 60_000)), "60000 x 60000 pixels"),
    (b64(b""), "is empty"),
    (12, "must be a base64-encoded image"),
])
def test_hostile_images_get_a_400_naming_where_they_were(value: object, says: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        images.from_base64(value, "messages[1].images[0]")
    assert "messages[1].images[0]" in err.value.message and says in err.value.message


def test_a_50_mb_string_is_refused_before_decoding() -> None:
    with pytest.raises(InvalidRequest, match="larger than 20 MB"):
        images.from_base64("A" * (50 << 20), "images[0]")


def test_remote_urls_are_not_fetched_and_other_media_types_are_refused() -> None:
    with pytest.raises(InvalidRequest, match="does not fetch images from the network"):
        images.from_data_url("https://example.com/cat.png", "image_url")
    with pytest.raises(InvalidRequest, match="is application/pdf, not an image"):
        images.from_data_url("data:application/pdf;base64," + b64(b"%PDF"), "image_url")


def test_more_than_the_limit_of_images_is_refused() -> None:
    one = images.check(png(2, 2), "x")
    images.check_request([one] * images.MAX_IMAGES)
    with pytest.raises(InvalidRequest, match="at most 16 in one request"):
        images.check_request([one] * (images.MAX_IMAGES + 1))
    big = images.Image(b"x" * (19 << 20), "png", 1, 1)
    with pytest.raises(InvalidRequest, match="at most 64 MB of images"):
        images.check_request([big] * 4)

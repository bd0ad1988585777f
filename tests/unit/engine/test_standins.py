"""Image stand-ins: the same image gives the same ids, and an image's start is found from its ids."""

from __future__ import annotations

import hashlib

from localrun.engine.standins import image_ids, image_start


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_the_same_image_gives_the_same_negative_ids_and_another_image_others() -> None:
    a, b = image_ids(digest(b"a"), 6), image_ids(digest(b"b"), 6)
    assert a == image_ids(digest(b"a"), 6) and all(t < 0 for t in a + b)
    assert not set(a) & set(b)


def test_an_images_start_is_found_even_beside_another_image() -> None:
    a, b = image_ids(digest(b"a"), 4), image_ids(digest(b"b"), 3)
    path = [1, 50, 51, *a, *b, 60]
    assert image_start(path, 3 + len(a)) == 3
    assert image_start(path, 3 + len(a) + len(b)) == 3 + len(a)
    assert image_start([*a], 2) == 0

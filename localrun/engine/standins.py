"""Image stand-ins: the negative ids an image's positions hold in a sequence's token list.

Never fed to llama.cpp as tokens (vision.py decodes the image's embeddings there instead), they key
the prefix cache: the same image gives the same ids, so a follow-up about it reuses its cells, and
a different image gives different ones, so two images never share cells. One image's ids count
down by one from ``-1 - base`` (``base`` from the image's sha256), which is how
:func:`image_start` finds where an image begins from the ids alone. Pure Python.
"""

from __future__ import annotations

_ID_SPACE = 1 << 62


def image_ids(digest: str, n: int) -> list[int]:
    """The stand-ins for ``n`` positions of the image whose sha256 is ``digest``: negative (never a
    vocabulary id), the same for the same image, different for a different one."""
    base = int(digest[:16], 16)
    return [-1 - (base + i) % _ID_SPACE for i in range(n)]


def image_start(path: list[int], end: int) -> int:
    """Where the image whose stand-ins end at ``path[end - 1]`` begins (``path[end - 1]`` must be one).

    Walks back while the ids count down, so two images side by side are told apart (unless one's
    digest continues the other's ids exactly, a 2**-62 chance)."""
    start = end - 1
    assert path[start] < 0, "not an image stand-in"
    while start > 0 and path[start - 1] < 0 and path[start - 1] == path[start] + 1:
        start -= 1
    return start

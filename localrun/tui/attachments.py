"""Images attached to a chat turn, as Ollama's REPL takes them (headless, no textual).

Two ways in: ``/image PATH`` (:class:`~localrun.tui.commands.AttachImage`), or a path to an image
file typed, pasted or dropped into the prompt (a terminal pastes a dropped file as its path,
possibly quoted or with ``\\ `` escapes): :func:`take_paths` takes such paths out of the prompt
text. Each file is read and checked here (:mod:`localrun.chat.images`: format, size) so a bad file
is refused before anything is sent; an attachment is sent as Ollama's base64 ``images``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..chat import images
from ..errors import InvalidRequest

EXTENSIONS = (".png", ".jpg", ".jpeg", ".gif", ".bmp")
# A path ending in an image extension: quoted, or unquoted with backslash-escaped spaces.
_PATH = re.compile(r"""(?:'(?P<single>[^']+)'|"(?P<double>[^"]+)"|(?P<bare>(?:[^\s'"\\]|\\.)+))""")


@dataclass(frozen=True, slots=True)
class Attachment:
    """One image file ready to send: its name (shown on the message) and its bytes as base64."""

    name: str
    data: str

    @property
    def label(self) -> str:
        return f"[image: {self.name}]"


def load(path: str | Path) -> Attachment:
    """Read and check the image at ``path``; InvalidRequest (its message for the user) if it is not one."""
    file = Path(path).expanduser()
    try:
        if file.stat().st_size > images.MAX_IMAGE_BYTES:
            raise InvalidRequest(f"{file} is larger than {images.MAX_IMAGE_BYTES >> 20} MB")
        data = file.read_bytes()
    except OSError as exc:
        raise InvalidRequest(f"cannot read {file}: {exc.strerror or exc}") from None
    return Attachment(file.name, images.check(data, str(file)).as_base64())


def take_paths(prompt: str) -> tuple[str, list[Path]]:
    """The prompt without the paths of existing image files it holds, and those paths in order."""
    found: list[Path] = []

    def replace(match: re.Match[str]) -> str:
        raw = match["single"] or match["double"] or re.sub(r"\\(.)", r"\1", match["bare"])
        path = Path(raw).expanduser()
        if path.suffix.lower() in EXTENSIONS and path.is_file():
            found.append(path)
            return ""
        return match.group(0)

    text = _PATH.sub(replace, prompt)
    return (re.sub(r"[ \t]{2,}", " ", text).strip() if found else prompt), found


def starts_with_path(text: str) -> bool:
    """Whether ``text`` begins with the path of an image file (a dropped file, not a slash command)."""
    first = _PATH.match(text)
    return first is not None and first.start() == 0 and bool(take_paths(first.group(0))[1])

"""Saved chat conversations: one JSON file per conversation under ``config.data_dir()/conversations``.

Conversations hold what the user typed, so the folder is created 0700 and every file 0600, written
atomically (a temporary file in the same folder, then ``os.replace``): a crash mid-write leaves the
previous version intact. The file format is versioned (``"version": 1``); a file that cannot be
read is skipped by :meth:`ConversationStore.list` (with a warning in the log) and raises
StoreError from :meth:`ConversationStore.load`, never crashing the UI.

This module is headless: no textual, no HTTP.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import NotRequired, TypedDict

from .. import config
from ..errors import NotFound, StoreError
from ..jsontypes import JSONObject, as_objects

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
_ID_RE = re.compile(r"^[0-9]{8}-[0-9]{6}-[0-9a-f]{6}$")
_TITLE_LEN = 60


class ChatMessage(TypedDict):
    """One message of a chat, as saved and as sent to ``/api/chat``.

    A reply may also keep its reasoning (``thinking``), the tool calls it made and whether it was
    ``stopped``; a user message its images (and their file names, for the screen). Role, content, tool
    calls and images are sent back to the model.
    """

    role: str
    content: str
    thinking: NotRequired[str]
    tool_calls: NotRequired[list[JSONObject]]
    stopped: NotRequired[bool]
    images: NotRequired[list[str]]        # a user message's images, base64 (Ollama's ``images``)
    image_names: NotRequired[list[str]]   # their file names, shown on the message (not sent)


@dataclass(slots=True)
class Conversation:
    """One chat: the model, the settings in force, and the messages (:class:`ChatMessage`).

    ``messages`` never contains the system prompt; it lives in ``system`` so that editing it
    applies to the whole conversation, as in ``ollama run``.
    """

    id: str
    model: str
    created_at: float
    updated_at: float
    title: str = ""
    system: str | None = None
    options: JSONObject = field(default_factory=dict)
    messages: list[ChatMessage] = field(default_factory=list)

    @classmethod
    def new(cls, model: str, *, system: str | None = None, options: JSONObject | None = None,
            now: float | None = None) -> Conversation:
        now = time.time() if now is None else now
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
        return cls(id=f"{stamp}-{secrets.token_hex(3)}", model=model, created_at=now, updated_at=now,
                   system=system, options=dict(options or {}))

    def auto_title(self) -> str:
        """The first line of the first user message, shortened: how the list names this chat."""
        for message in self.messages:
            if message["role"] == "user" and message["content"].strip():
                line = message["content"].strip().splitlines()[0]
                return line if len(line) <= _TITLE_LEN else line[: _TITLE_LEN - 1] + "…"
        return "(empty)"

    def to_json(self) -> JSONObject:
        return {"version": FORMAT_VERSION, **asdict(self)}

    @classmethod
    def from_json(cls, data: object) -> Conversation:
        """The conversation a file holds (``json.loads`` of it); ValueError, KeyError or TypeError if it is not one."""
        if not isinstance(data, dict) or data.get("version") != FORMAT_VERSION:
            raise ValueError("not a version-1 conversation")
        messages = data.get("messages", [])
        if not isinstance(messages, list) or not all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in messages
        ):
            raise ValueError("'messages' must be a list of {role, content} objects")
        options = data.get("options") or {}
        if not isinstance(options, dict):
            raise ValueError("'options' must be an object")
        system = data.get("system")
        return cls(
            id=str(data["id"]), model=str(data["model"]), created_at=float(data["created_at"]),
            updated_at=float(data["updated_at"]), title=str(data.get("title") or ""),
            system=system if isinstance(system, str) else None, options=options,
            messages=[_message(m) for m in messages],
        )


def _message(saved: JSONObject) -> ChatMessage:
    """A checked message (role and content are strings) with its optional fields that have their type;
    anything else a hand-edited file put in it is not kept."""
    message = ChatMessage(role=str(saved["role"]), content=str(saved["content"]))
    thinking, calls, stopped = saved.get("thinking"), saved.get("tool_calls"), saved.get("stopped")
    if isinstance(thinking, str):
        message["thinking"] = thinking
    if isinstance(calls, list):
        message["tool_calls"] = as_objects(calls)
    if isinstance(stopped, bool):
        message["stopped"] = stopped
    pictures, names = saved.get("images"), saved.get("image_names")
    if isinstance(pictures, list) and all(isinstance(p, str) for p in pictures):
        message["images"] = [str(p) for p in pictures]
    if isinstance(names, list) and all(isinstance(n, str) for n in names):
        message["image_names"] = [str(n) for n in names]
    return message


@dataclass(frozen=True, slots=True)
class ConversationSummary:
    id: str
    title: str
    model: str
    updated_at: float
    num_messages: int


def default_dir() -> Path:
    return config.data_dir() / "conversations"


class ConversationStore:
    """Save, list, load and delete conversations in ``root`` (default :func:`default_dir`)."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root if root is not None else default_dir()

    def _path(self, conversation_id: str) -> Path:
        if not _ID_RE.match(conversation_id):
            raise NotFound(f"no saved conversation {conversation_id!r}")
        return self.root / f"{conversation_id}.json"

    def _ensure_root(self) -> None:
        try:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create {self.root}: {exc.strerror or exc}") from exc

    def save(self, conversation: Conversation, *, now: float | None = None) -> Path:
        """Write ``conversation`` (mode 0600), updating ``updated_at`` and an empty ``title``."""
        conversation.updated_at = time.time() if now is None else now
        if not conversation.title:
            conversation.title = conversation.auto_title() if conversation.messages else ""
        path = self._path(conversation.id)
        self._ensure_root()
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        data = json.dumps(conversation.to_json(), ensure_ascii=False, indent=1).encode()
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise StoreError(f"cannot save conversation to {path}: {exc.strerror or exc}") from exc
        return path

    def load(self, conversation_id: str) -> Conversation:
        path = self._path(conversation_id)
        try:
            raw = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise NotFound(f"no saved conversation {conversation_id!r}") from None
        except OSError as exc:
            raise StoreError(f"cannot read {path}: {exc.strerror or exc}") from exc
        try:
            return Conversation.from_json(json.loads(raw))
        except (ValueError, KeyError, TypeError) as exc:
            raise StoreError(f"{path} is not a readable conversation: {exc}") from exc

    def list(self) -> list[ConversationSummary]:
        """Saved conversations, most recently updated first; unreadable files are skipped."""
        if not self.root.is_dir():
            return []
        out: list[ConversationSummary] = []
        for path in self.root.glob("*.json"):
            try:
                conv = self.load(path.stem)
            except (StoreError, NotFound) as exc:
                log.warning("skipping conversation file %s: %s", path, exc)
                continue
            out.append(ConversationSummary(conv.id, conv.title or conv.auto_title(), conv.model,
                                           conv.updated_at, len(conv.messages)))
        out.sort(key=lambda s: s.updated_at, reverse=True)
        return out

    def delete(self, conversation_id: str) -> None:
        path = self._path(conversation_id)
        try:
            path.unlink()
        except FileNotFoundError:
            raise NotFound(f"no saved conversation {conversation_id!r}") from None
        except OSError as exc:
            raise StoreError(f"cannot delete {path}: {exc.strerror or exc}") from exc

"""The state of one chat session, apart from how it is drawn (headless, no textual).

A :class:`ChatSession` owns the current :class:`~localrun.tui.conversations.Conversation` (model,
system prompt, parameters, messages) plus the session-only switches Ollama has (format, verbose,
history, think, hidethinking). It is mutated only by the chat screen, on the UI's event loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypedDict, Unpack

from ..chat.think import Think
from ..jsontypes import JSONObject
from ..parameters import ParameterValue
from .attachments import Attachment
from .conversations import ChatMessage, Conversation, ConversationStore


class Switches(TypedDict, total=False):
    """The session-only settings :meth:`ChatSession.start` may set (the fields of the same names)."""

    format: str | None
    verbose: bool
    keep_history: bool
    keep_alive: str | None
    think: Think | None
    hide_thinking: bool


@dataclass(slots=True)
class ChatSession:
    conversation: Conversation
    store: ConversationStore | None = None
    format: str | None = None
    verbose: bool = False
    keep_history: bool = True
    keep_alive: str | None = None
    think: Think | None = None  # the request's "think" (None: the model's default)
    hide_thinking: bool = False      # a thinking model's reasoning is kept with the reply but not shown
    saved_ids: set[str] = field(default_factory=set)
    noticed: set[str] = field(default_factory=set)       # models whose base-model notice was shown
    defaults: JSONObject = field(default_factory=dict)  # the current model's real defaults (/api/show)
    vision: bool = True  # the current model takes images (/api/show capabilities); True until known
    thinking: bool = True  # the current model can think (/api/show capabilities); True until known
    attached: list[Attachment] = field(default_factory=list)  # images for the next message (/image)

    @classmethod
    def start(cls, model: str, *, system: str | None = None, options: JSONObject | None = None,
              store: ConversationStore | None = None, **switches: Unpack[Switches]) -> ChatSession:
        return cls(Conversation.new(model, system=system, options=options), store, **switches)

    @property
    def model(self) -> str:
        return self.conversation.model

    @property
    def messages(self) -> list[ChatMessage]:
        return self.conversation.messages

    def request_messages(self, prompt: str) -> list[ChatMessage]:
        """What to send for a new user turn: system, the history (unless /set nohistory), the prompt."""
        out: list[ChatMessage] = []
        if self.conversation.system:
            out.append({"role": "system", "content": self.conversation.system})
        if self.keep_history:
            out += [_resent(m) for m in self.conversation.messages]
        out.append(_resent(self._user_message(prompt)))
        return out

    def _user_message(self, prompt: str) -> ChatMessage:
        message: ChatMessage = {"role": "user", "content": prompt}
        if self.attached:
            message["images"] = [a.data for a in self.attached]
            message["image_names"] = [a.name for a in self.attached]
        return message

    def request_fields(self) -> JSONObject:
        """The /api/chat fields besides model and messages: options, format, think, keep_alive."""
        fields: JSONObject = {}
        if self.conversation.options:
            fields["options"] = dict(self.conversation.options)
        if self.format:
            fields["format"] = self.format
        if self.think is not None:
            fields["think"] = self.think
        if self.keep_alive is not None:
            fields["keep_alive"] = self.keep_alive
        return fields

    def add_turn(self, prompt: str, reply: str, *, stopped: bool = False, thinking: str = "",
                 tool_calls: list[JSONObject] | None = None) -> None:
        """Record a finished (or stopped) turn; a stopped reply is kept as far as it got.

        The reasoning is saved with the reply (shown again when the chat is reopened) but not
        sent back to the model: templates drop earlier turns' reasoning anyway.
        """
        self.conversation.messages.append(self._user_message(prompt))
        self.attached = []
        message: ChatMessage = {"role": "assistant", "content": reply}
        if thinking:
            message["thinking"] = thinking
        if tool_calls:
            message["tool_calls"] = tool_calls
        if stopped:
            message["stopped"] = True
        self.conversation.messages.append(message)

    def set_parameter(self, name: str, value: ParameterValue) -> None:
        self.conversation.options[name] = [*value] if isinstance(value, list) else value

    def new_conversation(self) -> None:
        """Start over with the same model, system prompt and parameters (``/clear``)."""
        c = self.conversation
        self.conversation = Conversation.new(c.model, system=c.system, options=c.options)
        self.attached = []

    def save(self) -> None:
        """Persist the conversation if it has messages (a no-op without a store)."""
        if self.store is None or not self.conversation.messages:
            return
        self.store.save(self.conversation)
        self.saved_ids.add(self.conversation.id)


def _resent(message: ChatMessage) -> ChatMessage:
    """A saved message as the model gets it again: role, content, tool calls and images (no reasoning,
    no mark, no file names)."""
    out = ChatMessage(role=message["role"], content=message["content"])
    if "tool_calls" in message:
        out["tool_calls"] = message["tool_calls"]
    if "images" in message:
        out["images"] = message["images"]
    return out

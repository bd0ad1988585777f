"""The state of one chat session, apart from how it is drawn (headless, no textual).

A :class:`ChatSession` owns the current :class:`~localrun.conversations.Conversation` (model,
system prompt, parameters, messages) plus the session-only switches Ollama has (format, verbose,
history). It is mutated only by the chat screen, on the UI's event loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..conversations import Conversation, ConversationStore
from ..parameters import ParameterValue


@dataclass(slots=True)
class ChatSession:
    conversation: Conversation
    store: ConversationStore | None = None
    format: str | None = None
    verbose: bool = False
    keep_history: bool = True
    keep_alive: str | None = None
    saved_ids: set[str] = field(default_factory=set)
    noticed: set[str] = field(default_factory=set)       # models whose base-model notice was shown
    defaults: dict[str, Any] = field(default_factory=dict)  # the current model's real defaults (/api/show)

    @classmethod
    def start(cls, model: str, *, system: str | None = None, options: dict[str, Any] | None = None,
              store: ConversationStore | None = None, **switches: Any) -> ChatSession:
        return cls(Conversation.new(model, system=system, options=options), store, **switches)

    @property
    def model(self) -> str:
        return self.conversation.model

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.conversation.messages

    def request_messages(self, prompt: str) -> list[dict[str, Any]]:
        """What to send for a new user turn: system, the history (unless /set nohistory), the prompt."""
        out: list[dict[str, Any]] = []
        if self.conversation.system:
            out.append({"role": "system", "content": self.conversation.system})
        if self.keep_history:
            out += [{k: m[k] for k in ("role", "content", "tool_calls") if k in m} for m in self.conversation.messages]
        out.append({"role": "user", "content": prompt})
        return out

    def request_fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = {}
        if self.conversation.options:
            fields["options"] = dict(self.conversation.options)
        if self.format:
            fields["format"] = self.format
        if self.keep_alive is not None:
            fields["keep_alive"] = self.keep_alive
        return fields

    def add_turn(self, prompt: str, reply: str, *, stopped: bool = False, thinking: str = "",
                 tool_calls: list[dict[str, Any]] | None = None) -> None:
        """Record a finished (or stopped) turn; a stopped reply is kept as far as it got.

        The reasoning is saved with the reply (shown again when the chat is reopened) but not
        sent back to the model: templates drop earlier turns' reasoning anyway.
        """
        self.conversation.messages.append({"role": "user", "content": prompt})
        message: dict[str, Any] = {"role": "assistant", "content": reply}
        if thinking:
            message["thinking"] = thinking
        if tool_calls:
            message["tool_calls"] = tool_calls
        if stopped:
            message["stopped"] = True
        self.conversation.messages.append(message)

    def set_parameter(self, name: str, value: ParameterValue) -> None:
        self.conversation.options[name] = value

    def new_conversation(self) -> None:
        """Start over with the same model, system prompt and parameters (``/clear``)."""
        c = self.conversation
        self.conversation = Conversation.new(c.model, system=c.system, options=c.options)

    def save(self) -> None:
        """Persist the conversation if it has messages (a no-op without a store)."""
        if self.store is None or not self.conversation.messages:
            return
        self.store.save(self.conversation)
        self.saved_ids.add(self.conversation.id)

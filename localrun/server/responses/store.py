"""The responses ``/v1/responses`` keeps (``store``, true unless the request says false), in memory.

What a stored response is for, as OpenAI's API has it:

- ``previous_response_id``: a new request continues a stored response's conversation; the model
  reads that response's whole context (its own ``previous_response_id`` chain, its input items)
  and its output items, then the new input. The earlier ``instructions`` and ``tools`` are not
  carried over: each request sends its own.
- ``{"type": "item_reference", "id": ...}`` input items name an item of a stored response (an
  input item or an output item) instead of sending it again.
- ``GET /v1/responses/{id}``, ``DELETE /v1/responses/{id}`` and ``GET /v1/responses/{id}/input_items``.

Each entry holds its whole context (a list of references to the item objects of the responses it
continues, not copies), so a conversation does not break when older responses in its chain are
deleted or evicted. Bounded: at most :data:`MAX_RESPONSES` entries and :data:`MAX_BYTES` of JSON,
counted per entry over its whole context (items a chain shares are counted once per entry that
holds them: an over-count, never an under-count). The least recently used entries go first
(continuing a response, reading it or an item of it uses it). Nothing is written to disk: a
restart of the daemon forgets every response, and a request naming one that is gone gets a 400
that says why, never a reply that silently lacks the conversation.

Owned by the event loop; nothing here is thread-safe.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

from ...chat.events import new_id
from ...errors import PreviousResponseNotFound, ResponseNotFound
from ...jsontypes import JSONObject
from ..http import json_body

MAX_RESPONSES = 1024
MAX_BYTES = 256 << 20
_KEPT = f"this server keeps the last {MAX_RESPONSES} stored responses, {MAX_BYTES >> 20} MiB, in memory until restarted"


@dataclass(slots=True)
class StoredResponse:
    """One stored response: the object as it was returned, and what the model read to write it.

    ``context`` is the whole input the model read, oldest first, each item with an ``id``: the items
    of the responses it continues, then this request's own input items. ``n_bytes`` counts their
    JSON and the response's.
    """

    response: JSONObject
    context: list[JSONObject]
    n_bytes: int

    @property
    def id(self) -> str:
        return str(self.response["id"])

    def conversation(self) -> list[JSONObject]:
        """What a request continuing this response reads before its own input: this response's
        context, then its output items (reasoning items stay: the route's conversion skips them)."""
        output = self.response.get("output")
        return [*self.context, *(item for item in output if isinstance(item, dict))] if isinstance(output, list) \
            else list(self.context)


class ResponseStore:
    def __init__(self, max_responses: int = MAX_RESPONSES, max_bytes: int = MAX_BYTES) -> None:
        self.max_responses, self.max_bytes = max_responses, max_bytes
        self._entries: OrderedDict[str, StoredResponse] = OrderedDict()  # least recently used first
        self._bytes = 0
        self._items: dict[str, str] = {}  # item id -> id of the newest stored response that holds it

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def n_bytes(self) -> int:
        return self._bytes

    def get(self, response_id: str) -> StoredResponse:
        """The stored response ``response_id``; raises ResponseNotFound (404)."""
        entry = self._entries.get(response_id)
        if entry is None:
            raise ResponseNotFound(f"Response with id '{response_id}' not found ({_KEPT}).")
        self._entries.move_to_end(response_id)
        return entry

    def previous(self, response_id: str) -> StoredResponse:
        """The response a ``previous_response_id`` names; raises PreviousResponseNotFound (400)."""
        try:
            return self.get(response_id)
        except ResponseNotFound:
            raise PreviousResponseNotFound(f"Previous response with id '{response_id}' not found ({_KEPT}); send "
                                           "the whole conversation in 'input' instead.") from None

    def item(self, item_id: str) -> JSONObject | None:
        """The stored item (an input or output item of a stored response) with id ``item_id``, if any.

        Looked up in the newest response that holds it; when that one was deleted, every stored
        response is searched (newest first), as an older one may hold it too."""
        owner = self._items.get(item_id)
        entry = self._entries.get(owner) if owner is not None else None
        for candidate in [entry] if entry is not None else reversed(self._entries.values()):
            for item in candidate.conversation():
                if item.get("id") == item_id:
                    self._entries.move_to_end(candidate.id)
                    return item
        return None

    def put(self, response: JSONObject, context: Iterable[JSONObject]) -> StoredResponse:
        """Keep ``response`` with the ``context`` its model read (items without an ``id`` get one);
        evicts the least recently used entries past the bounds. Returns the entry."""
        items = [with_id(item) for item in context]
        entry = StoredResponse(response, items, len(json_body(response)) + sum(len(json_body(i)) for i in items))
        self.delete(entry.id, missing_ok=True)
        self._entries[entry.id] = entry
        self._bytes += entry.n_bytes
        for item in entry.conversation():
            item_id = item.get("id")
            if isinstance(item_id, str):
                self._items[item_id] = entry.id
        while len(self._entries) > 1 and (len(self._entries) > self.max_responses or self._bytes > self.max_bytes):
            self.delete(next(iter(self._entries)))
        return entry

    def delete(self, response_id: str, *, missing_ok: bool = False) -> None:
        """Forget ``response_id``; raises ResponseNotFound (404) when it is not stored, unless ``missing_ok``.
        Responses that continue it keep their own context."""
        entry = self._entries.pop(response_id, None)
        if entry is None:
            if missing_ok:
                return
            raise ResponseNotFound(f"Response with id '{response_id}' not found ({_KEPT}).")
        self._bytes -= entry.n_bytes
        for item in entry.conversation():
            item_id = item.get("id")
            if isinstance(item_id, str) and self._items.get(item_id) == response_id:
                del self._items[item_id]


def with_id(item: JSONObject) -> JSONObject:
    """``item`` with an ``id`` (``msg_``, ``fc_``, ``fco_``... as OpenAI names them); one that has a string
    id is returned as it is, any other gets a copy with a fresh id (in place of one that is not a string)."""
    if isinstance(item.get("id"), str) and item["id"]:
        return item
    kind = item.get("type", "message")
    prefix = {"function_call": "fc", "function_call_output": "fco", "reasoning": "rs"}.get(str(kind), "msg")
    return {"id": new_id(prefix), **{k: v for k, v in item.items() if k != "id"}}

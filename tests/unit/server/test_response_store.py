"""The stored responses behind ``previous_response_id``: what a continuation reads, what the bounds
evict, and that nothing a client relies on goes silently (a gone response is an error that says why)."""

from __future__ import annotations

from typing import Any

import pytest

from localrun.errors import PreviousResponseNotFound, ResponseNotFound
from localrun.server.responses.store import ResponseStore


def _response(rid: str, text: str) -> dict[str, Any]:
    return {"id": rid, "object": "response", "status": "completed", "output": [
        {"id": f"msg_{rid}", "type": "message", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]}]}


def _user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": text}


def test_a_chain_reads_every_earlier_input_and_output_in_order() -> None:
    store = ResponseStore()
    first = store.put(_response("resp_1", "Hi!"), [_user("hello")])
    second = store.put(_response("resp_2", "Fine."), [*store.previous("resp_1").conversation(), _user("how are you?")])
    assert first.context[0]["id"].startswith("msg_") and first.context[0]["content"] == "hello"
    texts = [i["content"] if isinstance(i["content"], str) else i["content"][0]["text"] for i in second.conversation()]
    assert texts == ["hello", "Hi!", "how are you?", "Fine."]
    assert second.context[0] is first.context[0]  # shared, not copied
    assert store.item("msg_resp_1") is first.response["output"][0]


def test_a_continuation_survives_the_deletion_of_what_it_continues() -> None:
    store = ResponseStore()
    store.put(_response("resp_1", "A"), [_user("q1")])
    store.put(_response("resp_2", "B"), [*store.previous("resp_1").conversation(), _user("q2")])
    store.delete("resp_1")
    with pytest.raises(ResponseNotFound):
        store.get("resp_1")
    with pytest.raises(PreviousResponseNotFound, match=r"resp_1.*not found.*until restarted.*whole conversation"):
        store.previous("resp_1")
    assert len(store.get("resp_2").conversation()) == 4
    assert store.item("msg_resp_1") is not None  # still held by resp_2
    with pytest.raises(ResponseNotFound):
        store.delete("resp_1")


def test_the_bounds_evict_the_least_recently_used_first() -> None:
    store = ResponseStore(max_responses=3)
    for i in range(3):
        store.put(_response(f"resp_{i}", "x"), [_user(str(i))])
    store.get("resp_0")  # used: now the newest
    store.put(_response("resp_3", "x"), [_user("3")])
    assert {e for e in ("resp_0", "resp_1", "resp_2", "resp_3") if _kept(store, e)} == {"resp_0", "resp_2", "resp_3"}
    big = ResponseStore(max_bytes=2_000)
    for i in range(10):
        big.put(_response(f"resp_{i}", "y" * 300), [_user("z" * 300)])
    assert 1 <= len(big) < 10 and big.n_bytes <= 2_000 and _kept(big, "resp_9")
    assert not _kept(big, "resp_0")


def test_one_response_over_the_byte_bound_is_still_kept_alone() -> None:
    store = ResponseStore(max_bytes=100)
    store.put(_response("resp_big", "w" * 1_000), [_user("v" * 1_000)])
    assert _kept(store, "resp_big") and len(store) == 1


def _kept(store: ResponseStore, rid: str) -> bool:
    try:
        store.get(rid)
    except ResponseNotFound:
        return False
    return True


def test_every_kept_item_has_a_string_id() -> None:
    store = ResponseStore()
    entry = store.put(_response("resp_1", "x"), [{**_user("a"), "id": 5}, {**_user("b"), "id": ""},
                                                  {**_user("c"), "id": "msg_mine"}])
    ids = [item["id"] for item in entry.context]
    assert all(isinstance(i, str) and i.startswith("msg_") for i in ids) and ids[2] == "msg_mine"

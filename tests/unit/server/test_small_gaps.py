"""Small pure pieces issue 14 added: token-array embedding input, which stop string ended a text, heartbeats."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from localrun.engine.detok import TextStream
from localrun.errors import InvalidRequest
from localrun.server.chat import with_heartbeat
from localrun.server.openai.convert import embedding_inputs


@pytest.mark.parametrize(("value", "inputs"), [
    ("a cat", ["a cat"]),
    (["a", "b"], ["a", "b"]),
    ([5, 6, 7], [[5, 6, 7]]),
    ([[5, 6], [7]], [[5, 6], [7]]),
])
def test_embedding_input_takes_text_and_token_arrays(value: Any, inputs: list[Any]) -> None:
    assert embedding_inputs(value) == inputs


@pytest.mark.parametrize("value", [None, [], [[]], [1, "a"], [[1], "a"], [-1], [[1, -2]], [True], [1.5],
                                   [[1], [True]], {"x": 1}])
def test_bad_embedding_input_is_a_400(value: Any) -> None:
    with pytest.raises(InvalidRequest):
        embedding_inputs(value)


def test_the_stop_string_that_ended_the_text_is_remembered() -> None:
    stream = TextStream(("END", "STOP"))
    out = stream.push(b"one ST") + stream.push(b"OP two END")
    assert out == "one " and stream.stopped and stream.matched == "STOP"
    plain = TextStream(("END",))
    plain.push(b"no stop here")
    assert plain.matched is None


async def test_heartbeats_fill_the_silence_without_losing_items() -> None:
    async def slow() -> AsyncIterator[int]:
        yield 1
        await asyncio.sleep(0.35)
        yield 2

    seen = [item async for item in with_heartbeat(slow(), 0.1)]
    assert seen[0] == 1 and seen[-1] == 2 and None in seen
    assert [s for s in seen if s is not None] == [1, 2]

"""The engine on the real starter model (Gemma 3 270M, sliding-window attention, 262k vocabulary)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import jsonschema
import pytest
from engine_helpers import collect, same_until_a_near_tie

from localrun.chat.template import ChatTemplate
from localrun.engine.engine import Engine
from localrun.engine.types import DoneReason, GenerateRequest, LoadOptions, SamplingOptions

pytestmark = [pytest.mark.starter, pytest.mark.slow]

GEMMA_GO_TEMPLATE = """{{- range .Messages }}<start_of_turn>
{{- if eq .Role "assistant" }}model{{ else }}{{ .Role }}{{ end }}
{{ .Content }}<end_of_turn>
{{ end }}<start_of_turn>model
"""


@pytest.fixture(scope="module")
def starter(gemma_gguf: Path) -> Iterator[Engine]:
    engine = Engine(str(gemma_gguf), LoadOptions(num_ctx=2048, num_parallel=2, num_batch=64))
    yield engine
    engine.close()


def greedy(n: int, **kw: object) -> SamplingOptions:
    return SamplingOptions(temperature=0, num_predict=n, **kw)  # type: ignore[arg-type]


def test_prefix_reuse_beyond_the_sliding_window_gives_the_same_output(gemma_gguf: Path) -> None:
    """A reused 576-token prefix (past the 512-token window) must give what computing it does.

    Long greedy continuations are not compared bit for bit: attention sums depend on which
    cells a sequence occupies (as in llama.cpp's server), so a near-tie may flip dozens of
    tokens later. A wrong reuse shows at once: in the first tokens and their log-probabilities.
    Both engines get one thread: past 512 cells ggml's decode attention (F16 keys and values)
    splits the cells among the threads and sums the parts, so the thread count, which follows
    the free cores, moves log-probabilities by up to 0.2 on this model (seen under CI load).
    """
    pinned = LoadOptions(num_ctx=2048, num_parallel=2, num_batch=64, num_thread=1)
    with Engine(str(gemma_gguf), pinned) as engine:
        text = " ".join(f"In year {1800 + i} the town council met about the harbour, the mill and the school."
                        for i in range(60))
        prefix = engine.tokenize(text)[:576]  # > the 512-token window, a multiple of num_batch
        assert engine.info.n_swa == 512 and len(prefix) == 576
        first = prefix + engine.tokenize(" Question: who built the mill? Answer:", add_special=False)
        second = prefix + engine.tokenize(" Summary of the decade:", add_special=False)
        options = greedy(12, logprobs=True, top_logprobs=5)
        collect(engine.submit(GenerateRequest(first, greedy(8))))
        hit = collect(engine.submit(GenerateRequest(second, options)))
    assert hit.done.cached_tokens == 576
    with Engine(str(gemma_gguf), replace(pinned, num_parallel=1)) as fresh:
        cold = collect(fresh.submit(GenerateRequest(second, options)))
    assert cold.done.cached_tokens == 0
    same_until_a_near_tie(cold, hit, margin=0.05)  # where the second request's cells land moves the sums
    assert len(hit.text) > 20
    for a, b in zip(hit.tokens[0].logprobs[0].top, cold.tokens[0].logprobs[0].top, strict=False):
        assert a[0] == b[0] and abs(a[1] - b[1]) < 0.02


def test_stop_string_spanning_tokens_is_never_emitted(starter: Engine) -> None:
    prompt = "The capital of France is Paris. The capital of Italy is Rome. The capital of Spain is"
    reference = collect(starter.submit(GenerateRequest(prompt, greedy(30))))
    tokens = reference.generated
    pieces = [starter.detokenize([t]) for t in tokens]
    boundary = len(pieces[0]) + len(pieces[1])  # a stop string across the 2nd/3rd token boundary
    stop = reference.text[boundary - 2: boundary + 2]
    assert len(stop) == 4 and reference.text.find(stop) >= 0
    stopped = collect(starter.submit(GenerateRequest(prompt, greedy(30, stop=(stop,)))))
    assert stopped.text == reference.text[: reference.text.find(stop)]
    assert stop not in "".join(t.text for t in stopped.tokens)
    assert stopped.done.done_reason is DoneReason.STOP


def test_streamed_text_is_valid_utf8_with_multibyte_characters(starter: Engine) -> None:
    prompt = "日本語の文章: 東京は日本の首都です。京都には古いお寺がたくさんあります。大阪は"
    result = collect(starter.submit(GenerateRequest(prompt, greedy(40))))
    assert result.text == starter.detokenize(result.generated)
    assert "\ufffd" not in result.text
    assert any(ord(c) > 0x3000 for c in result.text)


def test_chat_template_override_and_no_special_tokens_printed(starter: Engine) -> None:
    messages = [{"role": "user", "content": "Say hello in one short sentence."}]
    prompt = ChatTemplate.from_source(GEMMA_GO_TEMPLATE).render(messages)
    assert prompt == "<start_of_turn>user\nSay hello in one short sentence.<end_of_turn>\n<start_of_turn>model\n"
    tokens = starter.tokenize(prompt)
    assert starter.tokenize("<end_of_turn>", add_special=False) != []
    assert len(tokens) < len(prompt) // 2  # turn markers are single special tokens, not text
    result = collect(starter.submit(GenerateRequest(prompt, greedy(60))))
    for marker in ("<end_of_turn>", "<start_of_turn>", "<eos>", "<bos>"):
        assert marker not in result.text


PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer"},
        "city": {"enum": ["Paris", "Rome", "Oslo"]},
        "languages": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 3},
    },
    "required": ["name", "age", "city", "languages"],
}


def test_json_schema_and_json_mode_on_a_real_vocabulary(starter: Engine) -> None:
    prompt = "Describe a person who lives in Europe as JSON:\n"
    for seed in (1, 2):
        result = collect(starter.submit(GenerateRequest(prompt, SamplingOptions(
            temperature=0.8, seed=seed, num_predict=120), format=PERSON)))
        assert result.done.done_reason is DoneReason.STOP
        jsonschema.validate(json.loads(result.text), PERSON)
    free = collect(starter.submit(GenerateRequest('Return {"ok": true} as JSON: ', greedy(60), format="json")))
    assert free.done.done_reason is DoneReason.STOP
    json.loads(free.text)

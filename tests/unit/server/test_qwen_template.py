"""Qwen2.5's chat template rendered the way Hugging Face renders it, checked against text written by
hand from the template: the default system prompt, tools, an assistant tool call (OpenAI's and
Ollama's shapes), a tool result, the generation prompt, BOS handling and a continued reply."""

from __future__ import annotations

import json

from qwen_template import QWEN25_TEMPLATE

from localrun.chat.prompt import TemplateInputs, render

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Get the weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
TOOLS_JSON = ('{"type": "function", "function": {"name": "get_weather", "description": "Get the weather", '
              '"parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}')
TOOLS_BLOCK = (
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
    + TOOLS_JSON +
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
)
DEFAULT_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."


def test_a_plain_question_gets_the_templates_own_system_prompt() -> None:
    out = render(QWEN25_TEMPLATE, [{"role": "user", "content": "What is the capital of France?"}])
    assert out == (
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_a_system_prompt_replaces_the_default_and_no_generation_prompt_when_asked() -> None:
    messages = [{"role": "system", "content": "Answer like a pirate."}, {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Arrr, hello!"}, {"role": "user", "content": "Bye"}]
    assert render(QWEN25_TEMPLATE, messages, add_generation_prompt=False) == (
        "<|im_start|>system\nAnswer like a pirate.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nArrr, hello!<|im_end|>\n"
        "<|im_start|>user\nBye<|im_end|>\n"
    )


EXPECTED_TOOL_TURN = (
    "<|im_start|>system\nYou are a weather bot." + TOOLS_BLOCK +
    "<|im_start|>user\nWhat is the weather in Paris?<|im_end|>\n"
    "<|im_start|>assistant\n<tool_call>\n"
    '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>\n'
    "<|im_start|>user\n<tool_response>\n"
    '{"temperature_c": 18}\n</tool_response><|im_end|>\n'
    "<|im_start|>assistant\n"
)


def test_tools_a_tool_call_and_its_result_openai_shape() -> None:
    messages = [
        {"role": "system", "content": "You are a weather bot."},
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}]},  # OpenAI: arguments as text
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature_c": 18}'},
    ]
    assert render(QWEN25_TEMPLATE, messages, TOOLS) == EXPECTED_TOOL_TURN


def test_tools_a_tool_call_and_its_result_ollama_shape() -> None:
    messages = [
        {"role": "system", "content": "You are a weather bot."},
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "get_weather",
                                                                           "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "tool_name": "get_weather", "content": '{"temperature_c": 18}'},
    ]
    assert render(QWEN25_TEMPLATE, messages, TOOLS) == EXPECTED_TOOL_TURN


def test_tools_without_a_system_message_keep_the_default_one_and_two_results_share_a_turn() -> None:
    messages = [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": "Checking both.", "tool_calls": [
            {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
            {"function": {"name": "get_weather", "arguments": {"city": "Rome"}}}]},
        {"role": "tool", "content": "18 C"},
        {"role": "tool", "content": "25 C"},
    ]
    assert render(QWEN25_TEMPLATE, messages, TOOLS) == (
        "<|im_start|>system\n" + DEFAULT_SYSTEM + TOOLS_BLOCK +
        "<|im_start|>user\nWeather in Paris and Rome?<|im_end|>\n"
        "<|im_start|>assistant\nChecking both.\n<tool_call>\n"
        '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n<tool_call>\n'
        '{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\n18 C\n</tool_response>\n<tool_response>\n25 C\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_a_last_assistant_message_is_continued_not_closed() -> None:
    messages = [{"role": "user", "content": "Count to three."}, {"role": "assistant", "content": "One, two,"}]
    assert render(QWEN25_TEMPLATE, messages) == (
        "<|im_start|>system\n" + DEFAULT_SYSTEM + "<|im_end|>\n"
        "<|im_start|>user\nCount to three.<|im_end|>\n"
        "<|im_start|>assistant\nOne, two,"
    )


LLAMA3_HEAD = ("{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n"
               "{{ m.content }}{{ eos_token }}{% endfor %}"
               "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")


def test_bos_and_eos_texts_reach_the_template_and_a_bos_the_tokenizer_adds_is_not_doubled() -> None:
    messages = [{"role": "user", "content": "Hi"}]
    inputs = TemplateInputs(bos_token="<|begin_of_text|>", eos_token="<|eot_id|>")
    expected = ("<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\n")
    assert render(LLAMA3_HEAD, messages, inputs=inputs) == "<|begin_of_text|>" + expected
    stripped = TemplateInputs(bos_token="<|begin_of_text|>", eos_token="<|eot_id|>", strip_bos=True)
    assert render(LLAMA3_HEAD, messages, inputs=stripped) == expected

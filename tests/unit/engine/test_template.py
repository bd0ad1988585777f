"""Chat templates: Jinja2 in a sandbox, Ollama's Go-template subset, and no template."""

from __future__ import annotations

import pytest

from localrun.chat.template import ChatTemplate, is_go_template
from localrun.errors import TemplateError

CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello!"},
    {"role": "user", "content": "Why is the sky blue?"},
]


def test_jinja_chatml_renders_every_turn_and_the_generation_prompt() -> None:
    out = ChatTemplate.from_source(CHATML).render(MESSAGES)
    assert out.startswith("<|im_start|>system\nBe brief.<|im_end|>\n")
    assert out.endswith("<|im_start|>user\nWhy is the sky blue?<|im_end|>\n<|im_start|>assistant\n")
    without = ChatTemplate.from_source(CHATML).render(MESSAGES, add_generation_prompt=False)
    assert not without.endswith("assistant\n")


def test_jinja_hf_helpers_tools_and_raise_exception() -> None:
    source = (
        "{{ bos_token }}{% if tools %}TOOLS:{{ tools | tojson }}\n{% endif %}"
        "{% for m in messages %}{% if m.role not in ['user', 'assistant', 'system'] %}"
        "{{ raise_exception('bad role ' + m.role) }}{% endif %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
    )
    template = ChatTemplate.from_source(source)
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"q": "<city>"}}}]
    out = template.render(MESSAGES[:2], tools=tools, bos_token="<s>")
    assert out.startswith('<s>TOOLS:[{"type": "function"') and "<city>" in out  # no HTML escaping
    with pytest.raises(TemplateError, match="bad role tool"):
        template.render([{"role": "tool", "content": "x"}])


def test_images_reach_the_template() -> None:
    source = "{% for m in messages %}{{ m.content }}{% for i in m.images or [] %}<image>{% endfor %}{% endfor %}"
    out = ChatTemplate.from_source(source).render([{"role": "user", "content": "look", "images": ["AAAA"]}])
    assert out == "look<image>"


@pytest.mark.parametrize(
    "hostile",
    [
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ cycler.__init__.__globals__.os.popen('id').read() }}",
        "{{ self._TemplateReference__context }}",
        "{% set x = [] %}{{ x.append(1) }}",
        "{{ messages.__class__.__base__.__subclasses__() }}",
        "{{ raise_exception.__globals__['__builtins__']['open']('/etc/passwd').read() }}",
    ],
)
def test_hostile_jinja_template_cannot_escape_the_sandbox(hostile: str) -> None:
    with pytest.raises(TemplateError):
        ChatTemplate.from_source(hostile).render(MESSAGES)


def test_jinja_syntax_error_is_a_template_error() -> None:
    with pytest.raises(TemplateError, match="does not compile"):
        ChatTemplate.from_source("{% for m in messages %}")


def test_no_template_uses_the_prompt_as_is() -> None:
    template = ChatTemplate.from_source(None)
    assert template.render([{"role": "user", "content": "just this"}]) == "just this"


GO_MESSAGES = """{{- if .System }}<start_of_turn>system
{{ .System }}<end_of_turn>
{{ end }}
{{- range $i, $m := .Messages }}
{{- if eq .Role "user" }}<start_of_turn>user
{{ .Content }}<end_of_turn>
{{ else if eq .Role "assistant" }}<start_of_turn>model
{{ .Content }}<end_of_turn>
{{ end }}
{{- end }}<start_of_turn>model
"""


def test_go_template_with_messages_range_if_else() -> None:
    template = ChatTemplate.from_source(GO_MESSAGES)
    assert template.kind == "go"
    out = template.render(MESSAGES)
    assert out == (
        "<start_of_turn>system\nBe brief.<end_of_turn>\n"
        "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
        "<start_of_turn>user\nWhy is the sky blue?<end_of_turn>\n<start_of_turn>model\n"
    )


def test_go_legacy_system_prompt_response_template_cuts_at_response() -> None:
    source = "{{ if .System }}SYS: {{ .System }}\n{{ end }}USER: {{ .Prompt }}\nBOT: {{ .Response }}</s>\n"
    out = ChatTemplate.from_source(source).render(MESSAGES)
    assert out == "SYS: Be brief.\nUSER: Hi\nBOT: Hello!</s>\nUSER: Why is the sky blue?\nBOT: "


def test_go_tools_variables_and_functions() -> None:
    source = (
        "{{- if and .Tools (gt (len .Tools) 0) }}[TOOLS]{{ range .Tools }}{{ .Function.Name }} "
        "{{ json .Function.Parameters }}{{ end }}[/TOOLS]{{ end }}"
        "{{- range $i, $_ := .Messages }}{{ $last := eq (len (slice $.Messages $i)) 1 }}"
        "{{ if or (eq .Role \"user\") (eq .Role \"tool\") }}[U]{{ .Content }}{{ if $last }}[LAST]{{ end }}"
        "{{ else if .ToolCalls }}{{ range .ToolCalls }}CALL {{ .Function.Name }}({{ .Function.Arguments | json }})"
        "{{ end }}{{ end }}{{ end }}"
    )
    tools = [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}]
    messages = [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": "",
         "tool_calls": [{"function": {"name": "weather", "arguments": {"city": "Oslo"}}}]},
        {"role": "tool", "content": "cold"},
    ]
    out = ChatTemplate.from_source(source).render(messages, tools=tools)
    assert out == ('[TOOLS]weather {"type": "object"}[/TOOLS][U]weather?'
                   'CALL weather({"city": "Oslo"})[U]cold[LAST]')


def test_go_trim_markers_comments_and_with() -> None:
    source = "A  {{- /* note */ -}}  B {{ with .System }}<{{ . }}>{{ else }}none{{ end }}"
    assert ChatTemplate.from_source(source).render([{"role": "user", "content": "x"}]) == "AB none"


@pytest.mark.parametrize("bad", ["{{ if .System }}open", "{{ call .X }}", "{{ .System | nosuch }}"])
def test_go_template_errors_are_template_errors(bad: str) -> None:
    with pytest.raises(TemplateError):
        ChatTemplate.from_source(bad).render(MESSAGES)


def test_detection() -> None:
    assert is_go_template("{{ .Prompt }}")
    assert is_go_template("{{- range .Messages }}{{ end }}")
    assert not is_go_template(CHATML)
    assert not is_go_template("{{ bos_token }}{{ messages[0]['content'] }}")

"""Modelfile parser and renderer: table-driven, including malformed files with their line numbers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from localrun.errors import ModelfileError
from localrun.store.modelfile import Message, Modelfile, parse, render

VALID = [
    ("minimal", "FROM gemma3:270m\n", Modelfile(from_="gemma3:270m")),
    ("lowercase keywords and comments",
     "# a comment\nfrom ./m.gguf\n\n  # indented comment\nparameter Temperature 0.5\n",
     Modelfile(from_="./m.gguf", parameters={"temperature": 0.5})),
    ("every typed parameter",
     "FROM x\nPARAMETER num_ctx 8192\nPARAMETER num_batch 256\nPARAMETER num_gpu 0\nPARAMETER main_gpu 0\n"
     "PARAMETER num_thread 2\nPARAMETER use_mmap false\nPARAMETER num_keep 4\nPARAMETER seed -1\n"
     "PARAMETER num_predict 128\nPARAMETER top_k 40\nPARAMETER top_p 0.9\nPARAMETER min_p 0.05\n"
     "PARAMETER typical_p 1\nPARAMETER repeat_last_n 64\nPARAMETER temperature 0.7\nPARAMETER repeat_penalty 1.1\n"
     "PARAMETER presence_penalty 0.5\nPARAMETER frequency_penalty -0.5\n",
     Modelfile(from_="x", parameters={
         "num_ctx": 8192, "num_batch": 256, "num_gpu": 0, "main_gpu": 0, "num_thread": 2, "use_mmap": False,
         "num_keep": 4, "seed": -1, "num_predict": 128, "top_k": 40, "top_p": 0.9, "min_p": 0.05, "typical_p": 1.0,
         "repeat_last_n": 64, "temperature": 0.7, "repeat_penalty": 1.1, "presence_penalty": 0.5,
         "frequency_penalty": -0.5})),
    ("repeatable stop, quoted",
     'FROM x\nPARAMETER stop "<|im_end|>"\nPARAMETER stop <|im_start|>\nPARAMETER stop "a \\"quoted\\" stop"\n',
     Modelfile(from_="x", parameters={"stop": ["<|im_end|>", "<|im_start|>", 'a "quoted" stop']})),
    ("multi-line template and system",
     'FROM x\nTEMPLATE """{{ range .Messages }}\n{{ .Content }}\n{{ end }}"""\nSYSTEM """\nYou are Mario.\n"""\n',
     Modelfile(from_="x", template="{{ range .Messages }}\n{{ .Content }}\n{{ end }}", system="\nYou are Mario.\n")),
    ("single-line triple quotes and bare multi-word values",
     'FROM x\nSYSTEM """Be brief."""\nTEMPLATE {{ .Prompt }}\n',
     Modelfile(from_="x", system="Be brief.", template="{{ .Prompt }}")),
    ("a second FROM is the vision projector (Ollama's convention)",
     'FROM ./gemma-3-4b.gguf\nFROM ./mmproj-gemma-3-4b-f16.gguf\n',
     Modelfile(from_="./gemma-3-4b.gguf", projector="./mmproj-gemma-3-4b-f16.gguf")),
    ("adapter, licenses, messages",
     'FROM x\nADAPTER ./lora.gguf\nLICENSE MIT\nLICENSE """Apache\n2.0"""\nMESSAGE user Is Toronto in Canada?\n'
     'MESSAGE Assistant yes\nMESSAGE system """multi\nline"""\n',
     Modelfile(from_="x", adapter="./lora.gguf", licenses=["MIT", "Apache\n2.0"],
               messages=[Message("user", "Is Toronto in Canada?"), Message("assistant", "yes"),
                         Message("system", "multi\nline")])),
    ("tabs between words", "FROM\tx\nPARAMETER\ttop_k\t5\n", Modelfile(from_="x", parameters={"top_k": 5})),
    ("quoted FROM path", 'FROM "./my model.gguf"\n', Modelfile(from_="./my model.gguf")),
    ("bool spellings", "FROM x\nPARAMETER use_mmap TRUE\n", Modelfile(from_="x", parameters={"use_mmap": True})),
    ("legacy Ollama parameter accepted", "FROM x\nPARAMETER mirostat 0\n",
     Modelfile(from_="x", parameters={"mirostat": 0})),
]


@pytest.mark.parametrize(("label", "text", "expected"), VALID, ids=[v[0] for v in VALID])
def test_parse_valid(label: str, text: str, expected: Modelfile) -> None:
    assert parse(text) == expected


@pytest.mark.parametrize(("label", "text", "expected"), VALID, ids=[v[0] for v in VALID])
def test_render_parses_back_to_the_same_model(label: str, text: str, expected: Modelfile) -> None:
    assert parse(render(parse(text))) == expected


MALFORMED = [
    ("no FROM", "PARAMETER temperature 1\n", None, "no FROM instruction"),
    ("empty file", "", None, "no FROM instruction"),
    ("unknown instruction", "FROM x\nFORM y\n", 2, "unknown instruction 'FORM'; expected one of FROM"),
    ("FROM without value", "FROM\n", 1, "FROM needs a value"),
    ("FROM three times", "FROM a\nFROM b.gguf\nFROM c\n", 3, "FROM given three times; expected the model and"),
    ("unknown parameter", "FROM x\n\nPARAMETER temprature 1\n", 3, "unknown parameter 'temprature'; expected one of"),
    ("parameter without value", "FROM x\nPARAMETER top_k\n", 2, "PARAMETER needs a name and a value"),
    ("int parameter not a number", "FROM x\nPARAMETER num_ctx lots\n", 2, "expects a whole number, got 'lots'"),
    ("float parameter not a number", "FROM x\nPARAMETER temperature hot\n", 2, "expects a number, got 'hot'"),
    ("float given to int", "FROM x\nPARAMETER top_k 0.5\n", 2, "expects a whole number"),
    ("bool not a bool", "FROM x\nPARAMETER use_mmap maybe\n", 2, "expects true or false"),
    ("nan", "FROM x\nPARAMETER temperature nan\n", 2, "finite number"),
    ("negative num_ctx", "FROM x\nPARAMETER num_ctx -1\n", 2, "at least 16"),
    ("num_ctx below the engine's smallest", "FROM x\nPARAMETER num_ctx 8\n", 2, "at least 16"),
    ("zero num_batch", "FROM x\nPARAMETER num_batch 0\n", 2, "at least 1"),
    ("top_p over one", "FROM x\nPARAMETER top_p 1.5\n", 2, "between 0 and 1"),
    ("unterminated triple quote", 'FROM x\nTEMPLATE """{{ .Prompt }}\nmore\n', 3,
     'unterminated """ value of TEMPLATE opened on line 2'),
    ("text after closing triple quote", 'FROM x\nSYSTEM """hi""" there\n', 2, 'unexpected text after the closing """'),
    ("unterminated quote", 'FROM x\nSYSTEM "hello\n', 2, 'unterminated quoted value; expected a closing "'),
    ("text after closing quote", 'FROM x\nPARAMETER stop "a" b\n', 2, "unexpected text after the closing quote"),
    ("bad message role", "FROM x\nMESSAGE bot hi\n", 2, "MESSAGE role must be one of system, user, assistant"),
    ("message without content", "FROM x\nMESSAGE user\n", 2, "MESSAGE needs a name and a value"),
    ("template twice", "FROM x\nTEMPLATE a\nTEMPLATE b\n", 3, "TEMPLATE given twice"),
    ("NUL byte", "FROM x\x00\n", None, "NUL byte"),
]


@pytest.mark.parametrize(("label", "text", "line", "fragment"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_parse_malformed(label: str, text: str, line: int | None, fragment: str) -> None:
    with pytest.raises(ModelfileError) as exc:
        parse(text)
    assert exc.value.line == line
    assert fragment in str(exc.value)
    if line is not None:
        assert str(exc.value).startswith(f"line {line}: ")


_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40)


@given(system=_text, template=_text, stop=st.lists(_text.filter(bool), max_size=3), msg=_text)
def test_render_round_trips_any_text(system: str, template: str, stop: list[str], msg: str) -> None:
    mf = Modelfile(from_="base:latest", system=system, template=template,
                   parameters={"stop": stop} if stop else {}, messages=[Message("user", msg)], licenses=[msg])
    assert parse(render(mf)) == mf


def test_render_header_is_comments() -> None:
    text = render(Modelfile(from_="x"), header="generated\nby test")
    assert text.startswith("# generated\n# by test\nFROM x\n")
    assert parse(text) == Modelfile(from_="x")

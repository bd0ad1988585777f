"""Slash commands as Ollama users type them: parsing, typed parameters, /show text, /save Modelfiles."""

from __future__ import annotations

import pytest

from localrun.errors import InvalidRequest
from localrun.tui import commands as cmd


@pytest.mark.parametrize(("line", "expected"), [
    ("/set parameter temperature 0.7", cmd.SetParameter("temperature", 0.7)),
    ("/set parameter NUM_CTX 4096", cmd.SetParameter("num_ctx", 4096)),
    ("/set parameter stop <end> ###", cmd.SetParameter("stop", ["<end>", "###"])),
    ("/set parameter", cmd.ListParameters()),
    ('/set system """You are a pirate."""', cmd.SetSystem("You are a pirate.")),
    ("/set system be brief", cmd.SetSystem("be brief")),
    ("/set system", cmd.SetSystem(None)),
    ("/set format json", cmd.SetFormat("json")),
    ("/set noformat", cmd.SetFormat(None)),
    ("/set verbose", cmd.SetVerbose(True)),
    ("/set quiet", cmd.SetVerbose(False)),
    ("/set nohistory", cmd.SetHistory(False)),
    ("/set think", cmd.SetThink(True)),
    ("/set think high", cmd.SetThink("high")),
    ("/set think false", cmd.SetThink(False)),
    ("/set nothink", cmd.SetThink(False)),
    ("/set hidethinking", cmd.SetHideThinking(True)),
    ("/set nohidethinking", cmd.SetHideThinking(False)),
    ("/show info", cmd.Show("info")),
    ("/show LICENSE", cmd.Show("license")),
    ("/load gemma3:270m", cmd.Load("gemma3:270m")),
    ("/save my-model", cmd.Save("my-model")),
    ("/clear", cmd.Clear()),
    ("/bye", cmd.Bye()),
    ("/exit", cmd.Bye()),
])
def test_parse(line: str, expected: cmd.Command) -> None:
    assert cmd.parse(line) == expected


@pytest.mark.parametrize(("line", "message"), [
    # the wording of localrun.parameters, shared with Modelfile PARAMETER errors
    ("/set parameter temperature warm", "expects a number"),
    ("/set parameter top_k 2.5", "expects a whole number"),
    ("/set parameter top_p 1.5", "between 0 and 1"),
    ("/set parameter num_ctx -1", "at least 16"),
    ("/set parameter temperature nan", "expects a finite number"),
    ("/set parameter flavour 3", "Unknown parameter 'flavour'"),
    ("/set parameter seed", "Usage"),
    ("/set format yaml", "Usage"),
    ("/set think hard", r"/set think \[high\|medium\|low\]"),
    ("/set colour", "Available /set commands"),
    ("/show everything", "Available /show commands"),
    ("/load", "Usage"),
    ("/load a b", "Usage"),
    ("/save", "Usage"),
    ("/nope", "Unknown command '/nope'"),
])
def test_parse_errors_say_what_is_wrong(line: str, message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        cmd.parse(line)


def test_help_topics() -> None:
    assert "/set parameter" in cmd.parse("/? set").text  # type: ignore[union-attr]
    assert "/show modelfile" in cmd.parse("/help show").text  # type: ignore[union-attr]
    assert "Esc" in cmd.parse("/? shortcuts").text  # type: ignore[union-attr]
    general = cmd.parse("/?").text  # type: ignore[union-attr]
    for word in ("/set", "/show", "/load", "/save", "/clear", "/bye", "Ctrl+J"):
        assert word in general


def test_is_command() -> None:
    assert cmd.is_command("/show info")
    assert not cmd.is_command("hello /show")
    assert not cmd.is_command('"""/not a command"""')


def test_save_modelfile_like_ollama() -> None:
    text = cmd.save_modelfile(
        "tiny:latest", "Be brief.", {"temperature": 0.0, "stop": ["<a>", "b c"], "num_ctx": 512},
        [{"role": "user", "content": 'say "hi"\nplease'}, {"role": "assistant", "content": 'ends with quote"'}],
    )
    lines = text.splitlines()
    assert lines[0] == "FROM tiny:latest"
    assert 'SYSTEM """Be brief."""' in lines
    assert "PARAMETER num_ctx 512" in lines and "PARAMETER temperature 0.0" in lines
    assert "PARAMETER stop <a>" in lines and 'PARAMETER stop "b c"' in lines
    assert 'MESSAGE user """say "hi"' in text
    assert 'MESSAGE assistant "ends with quote\\""' in lines  # a value ending in " cannot use """


def test_save_modelfile_parses_back_with_the_store_parser() -> None:
    parse = pytest.importorskip("localrun.store").parse_modelfile
    messages = [{"role": "user", "content": 'a """tricky""" one\n\tline'}, {"role": "assistant", "content": "ok"}]
    mf = parse(cmd.save_modelfile("tiny:latest", "sys\nprompt", {"temperature": 0.5, "stop": ["x y"]}, messages))
    assert mf.from_ == "tiny:latest" and mf.system == "sys\nprompt"
    assert mf.parameters["temperature"] == 0.5 and mf.parameters["stop"] == ["x y"]
    assert [(m.role, m.content) for m in mf.messages] == [(m["role"], m["content"]) for m in messages]


SHOW = {
    "modelfile": "FROM x\nPARAMETER temperature 0.7\n", "parameters": "temperature 0.7", "template": "{{ .Prompt }}",
    "system": "model system", "license": ["MIT License\nmore"],
    "details": {"family": "gemma3", "parameter_size": "268M", "quantization_level": "Q4_K_M"},
    "model_info": {"general.architecture": "gemma3", "gemma3.context_length": 32768, "gemma3.embedding_length": 640},
}


def test_show_text() -> None:
    info = cmd.show_text("info", SHOW, None, {})
    assert "gemma3" in info and "268M" in info and "32768" in info and "Q4_K_M" in info and "MIT License" in info
    assert cmd.show_text("modelfile", SHOW, None, {}).startswith("FROM x")
    assert cmd.show_text("system", SHOW, None, {}) == "model system"
    assert cmd.show_text("system", SHOW, "session system", {}) == "session system"
    params = cmd.show_text("parameters", SHOW, None, {"seed": 3})
    assert "temperature 0.7" in params and "seed" in params and "User defined" in params
    assert "No prompt template" in cmd.show_text("template", {}, None, {})
    assert "No license" in cmd.show_text("license", {}, None, {})

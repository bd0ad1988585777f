"""The command line reads options before or after positional arguments, for every command (issue #16)."""

from __future__ import annotations

import argparse

import pytest

from localrun.cli.main import COMMANDS, build_parser


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


@pytest.mark.parametrize("argv", [
    ["run", "tiny", "--verbose", "hi", "there"],
    ["run", "--verbose", "tiny", "hi", "there"],
    ["run", "tiny", "hi", "--verbose", "there"],
    ["run", "tiny", "hi", "there", "--verbose"],
])
def test_run_takes_its_options_anywhere(argv: list[str]) -> None:
    args = parse(*argv)
    assert (args.model, args.prompt, args.verbose) == ("tiny", ["hi", "there"], True)


def test_options_with_values_and_repeats_mix_with_the_prompt() -> None:
    args = parse("run", "tiny", "why", "-o", "temperature=0", "is", "--keepalive", "5m", "it", "-o", "seed=1")
    assert args.prompt == ["why", "is", "it"]
    assert args.option == ["temperature=0", "seed=1"] and args.keepalive == "5m"


def test_double_dash_ends_the_options() -> None:
    args = parse("run", "tiny", "--", "--verbose", "-o")
    assert args.prompt == ["--verbose", "-o"] and not args.verbose


@pytest.mark.parametrize("argv, expected", [
    (["show", "--modelfile", "tiny"], ("tiny", True)),
    (["show", "tiny", "--modelfile"], ("tiny", True)),
])
def test_store_commands_too(argv: list[str], expected: tuple[str, bool]) -> None:
    args = parse(*argv)
    assert (args.model, args.modelfile) == expected


def test_create_with_the_file_before_the_name() -> None:
    args = parse("create", "-f", "Modelfile.x", "mine")
    assert (args.model, args.file) == ("mine", "Modelfile.x")


def test_a_mistake_prints_the_commands_own_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse("run", "tiny", "hi", "--bogus")
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: localrun run ") and "unrecognized arguments: --bogus" in err
    assert "COMMAND" not in err  # not the top-level usage


def test_a_missing_argument_names_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse("cp", "only-one")
    err = capsys.readouterr().err
    assert err.startswith("usage: localrun cp ") and "destination" in err


def test_nested_groups_read_their_options_after_the_action() -> None:
    args = parse("service", "install", "--kind", "systemd", "--no-start")
    assert (args.kind, args.action, args.no_start) == ("systemd", "install", True)
    assert parse("service", "--kind", "launchd", "show").kind == "launchd"
    assert parse("daemon", "logs", "-f").follow is True
    assert parse("daemon", "stop", "--grace", "2").grace == 2.0


def _commands(parser: argparse.ArgumentParser) -> set[str]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return set(sub.choices)


def test_every_command_is_found_when_only_its_own_module_is_imported() -> None:
    """`localrun CMD` imports only CMD's module (start-up time); a command missing from that map
    would be an 'invalid choice' although `localrun --help` lists it."""
    from localrun.cli.main import COMMANDS

    every = _commands(build_parser())
    assert every == set(COMMANDS)
    for name in every:
        assert name in _commands(build_parser([name]))


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_prints_its_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`localrun COMMAND --help` shows the usage and exits 0 (a stray % in a help text once crashed it)."""
    with pytest.raises(SystemExit) as exited:
        build_parser([command]).parse_args([command, "--help"])
    assert exited.value.code == 0
    assert "usage: localrun " in capsys.readouterr().out  # aliases (ls) show their command's usage

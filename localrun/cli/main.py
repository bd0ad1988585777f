"""Entry point of the ``localrun`` command.

Each command group lives in its own module exposing ``register(subparsers)``; it adds its
sub-parsers and sets ``func`` (a callable taking the parsed ``argparse.Namespace`` and
returning the exit code). Every command's options may come before or after its positional
arguments (:mod:`.parsing`). Before a command runs, every ``LOCALRUN_*`` setting is checked.
Errors from the :mod:`localrun.errors` tree are printed as ``Error: message`` with exit code 1;
a bad setting exits with 2; Ctrl-C with 130.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from .. import __version__, config
from ..errors import ConfigError, LocalrunError
from .parsing import CommandParser

# Command modules, in help order. A module listed here that is missing is skipped, so the
# CLI keeps working while later command groups are still being written.
COMMAND_MODULES = (
    "localrun.cli.serve_cmd",
    "localrun.cli.run_cmd",
    "localrun.cli.store_cmds",
    "localrun.cli.daemon_cmds",
    "localrun.cli.daemon_control",
    "localrun.cli.top_cmd",
    "localrun.cli.bench_cmd",
    "localrun.cli.info_cmd",
    "localrun.cli.service_cmd",
    "localrun.cli.launch_cmd",
    "localrun.cli.upstream_cmd",
    "localrun.cli.retrieval_cmds",
)
# The module that registers each command: running one command imports only its module, so
# `localrun serve` (the daemon, which stays in memory) and `localrun run` start without importing
# the bench, the dashboard or the store commands' progress bars.
COMMANDS = {
    "serve": "localrun.cli.serve_cmd", "run": "localrun.cli.run_cmd", "ps": "localrun.cli.daemon_cmds",
    "stop": "localrun.cli.daemon_cmds", "top": "localrun.cli.top_cmd", "bench": "localrun.cli.bench_cmd",
    "info": "localrun.cli.info_cmd", "service": "localrun.cli.service_cmd", "daemon": "localrun.cli.daemon_control",
    "launch": "localrun.cli.launch_cmd", "upstream": "localrun.cli.upstream_cmd",
    "embed": "localrun.cli.retrieval_cmds", "rerank": "localrun.cli.retrieval_cmds",
    **{name: "localrun.cli.store_cmds" for name in ("pull", "create", "list", "ls", "show", "cp", "rm", "verify",
                                                     "import-ollama")},
}


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The ``localrun`` parser; every command's parser reads its options anywhere (:mod:`.parsing`).

    Given the command line, it holds only the command module its first word names (all without).
    """
    parser = CommandParser(
        prog="localrun",
        description="Run language models locally: pull, serve, chat.",
    )
    parser.add_argument("-v", "--version", action="version", version=f"localrun {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    module_of = COMMANDS.get(argv[0]) if argv else None
    for name in (module_of,) if module_of else COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue
            raise
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 0
    try:
        # Every LOCALRUN_* value is checked here, before any work: a bad one is an error even when a
        # running daemon would never read it (config.py holds each rule).
        config.load_settings()
        from .connect import warn_about_unknown_variables

        warn_about_unknown_variables()
        code = func(args)
    except ConfigError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 2
    except LocalrunError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `localrun list | head`: stop quietly, and keep Python from complaining at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    return int(code or 0)


if __name__ == "__main__":  # pragma: no cover - `python -m localrun.cli.main`
    sys.exit(main())

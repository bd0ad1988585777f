"""``localrun serve``: run the daemon in the foreground (Ctrl-C stops it and unloads models)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

from .. import config
from ..errors import ConfigError


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser("serve", help="run the localrun daemon (Ollama- and OpenAI-compatible APIs)")
    p.add_argument("--host", help="host:port to listen on (default: LOCALRUN_HOST, 127.0.0.1:11435)")
    p.add_argument("--log-level", default=os.environ.get("LOCALRUN_LOG_LEVEL", "INFO"),
                   help="DEBUG, INFO, WARNING (default INFO; prompts are only logged at DEBUG)")
    p.set_defaults(func=run)


def setup_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(), stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


def run(args: argparse.Namespace) -> int:
    if args.host:
        os.environ["LOCALRUN_HOST"] = args.host
    settings = config.load_settings()
    try:
        setup_logging(args.log_level)
    except ValueError:
        raise ConfigError(f"--log-level {args.log_level!r}: expected DEBUG, INFO, WARNING or ERROR") from None
    from ..server.app import serve

    try:
        asyncio.run(serve(settings))
    except OSError as exc:
        print(f"Error: cannot listen on {settings.host.url}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    return 0

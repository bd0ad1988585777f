"""``localrun run [MODEL] [PROMPT...]``: talk to a model, in the chat UI or as a plain-text pipe.

Steps, as ``ollama run`` takes them: make sure a daemon answers (starting ``localrun serve`` in
the background when none does, and saying so on stderr), make sure the model is in the store
(pulling it with a progress bar), then either print one streamed answer to stdout and exit
(a PROMPT was given, or stdin is not a terminal: ``echo hi | localrun run m``) or open the chat UI.

Exit codes: 0 success; 1 an error (message on stderr: unknown model, daemon down, generation
failed); 2 bad usage or settings; 130 interrupted. Status lines go to stderr, so stdout holds
only the answer.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, TextIO

from .. import config
from ..errors import ConfigError, InvalidRequest, UnsupportedCapability
from ..jsontypes import JSONObject, as_number
from .connect import connect

if TYPE_CHECKING:
    from ..client import Client


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser(
        "run", help="chat with a model (or answer one prompt and exit)",
        description="Chat with a model in the terminal UI; with a PROMPT, or with input piped in, print the "
                    "answer as plain text and exit. Starts the daemon and pulls the model when needed.",
        epilog="Exit codes: 0 success, 1 error, 2 bad usage, 130 interrupted. "
               "In the chat, type /? for commands.",
    )
    p.add_argument("model", nargs="?", default=None, help=f"model name (default: the starter, {config.STARTER_MODEL})")
    p.add_argument("prompt", nargs="*", help="a prompt to answer and exit (stdin, when piped, comes first)")
    p.add_argument("--system", help="system message for this run")
    p.add_argument("--keepalive", metavar="DURATION", help="how long the model stays loaded after (e.g. 5m, 0, -1)")
    p.add_argument("--format", choices=["json"], help="ask for output in this format")
    p.add_argument("--think", nargs="?", const="true", metavar="VALUE",
                   help="a thinking model reasons first (true, the default without a value) or not (false); "
                        "high, medium or low set the effort where the model has levels")
    p.add_argument("--hidethinking", action="store_true",
                   help="do not show a thinking model's reasoning (it still reasons unless --think=false)")
    p.add_argument("-o", "--option", action="append", default=[], metavar="NAME=VALUE",
                   help="a model parameter for this run, e.g. -o temperature=0 -o num_predict=64 (repeatable)")
    p.add_argument("--verbose", action="store_true", help="print timings (tokens/s, time to first token) after")
    p.add_argument("--nowordwrap", action="store_true",
                   help="accepted for Ollama compatibility: plain output is never wrapped")
    p.add_argument("--insecure", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--no-save", action="store_true", help="do not save the chat under the user data dir")
    p.set_defaults(func=run)


def _err(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def pull_with_progress(client: Client, model: str) -> None:
    """Pull ``model``, drawing a progress bar on stderr (plain lines when stderr is not a terminal)."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TaskID,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    console = Console(stderr=True)
    if not console.is_terminal:
        last = None
        for chunk in client.pull(model):
            status = str(chunk.get("status") or "")
            if status != last:
                _err(status)
                last = status
        return
    with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                  TimeRemainingColumn(), console=console, transient=False) as progress:
        tasks: dict[str, TaskID] = {}
        for chunk in client.pull(model):
            status = str(chunk.get("status") or "")
            key = str(chunk.get("digest") or status)
            total, completed = as_number(chunk.get("total")), as_number(chunk.get("completed"))
            if key not in tasks:
                tasks[key] = progress.add_task(status[:40], total=total if total else None)
            progress.update(tasks[key], description=status[:40], completed=completed or 0,
                            total=total if total else None)
            if not total:
                progress.update(tasks[key], total=1, completed=1)


def ensure_model(client: Client, model: str) -> None:
    """Pull ``model`` when the store does not list it, with progress (Ollama: "pulling manifest" and bars).

    Presence is read from the model list rather than ``show``: for the starter, ``show`` would
    import it silently, and a user waiting seconds with no output thinks it hangs.
    """
    from ..tui.model_ops import full_name

    names = {full_name(str(m.get("name") or m.get("model") or "")) for m in client.list()}
    if full_name(model) in names:
        return
    _err(f"pulling {model}…")
    pull_with_progress(client, model)


TRY_INSTEAD = {"embedding": "localrun run {model} TEXT (or localrun embed {model} TEXT...)",
               "rerank": "localrun rerank {model} QUERY DOC..."}


def check_can_chat(client: Client, model: str, *, one_shot: bool) -> bool:
    """Whether ``model`` answers by chatting (True) or, for a one-shot prompt to an embedding model,
    by printing the prompt's embedding (False), as ``ollama run`` does for embedding models.

    UnsupportedCapability, naming the command to use, for the chat UI on an embedding model and
    for a reranker; for a one-shot prompt, a note on stderr when it is a base (completion-only)
    model (the chat UI says that in its log when it opens, once per session)."""
    from ..tui.model_ops import base_model_notice

    details = client.show(model).get("details") or {}
    if not isinstance(details, dict):
        return True
    kind = str(details.get("kind") or "")
    if kind == "embedding" and one_shot:
        return False
    if kind in TRY_INSTEAD:
        what = "an embedding model" if kind == "embedding" else "a reranker"
        raise UnsupportedCapability(f"{model} is {what}: it cannot chat; try `{TRY_INSTEAD[kind].format(model=model)}`")
    if one_shot and details.get("base_model"):
        _err(f"Note: {base_model_notice(model)}")
    return True


def embed_once(client: Client, model: str, prompt: str) -> int:
    """Print the embedding of ``prompt`` as one JSON array (what ``ollama run EMBEDDING-MODEL TEXT`` prints)."""
    from .retrieval_cmds import print_embeddings

    print_embeddings(client.embed(model, [prompt]))
    return 0


def read_prompt(args: argparse.Namespace) -> str | None:
    """The one-shot prompt, or None for the chat UI. Piped stdin comes first, then the arguments."""
    parts = []
    if not sys.stdin.isatty():
        parts.append(sys.stdin.read())
    if args.prompt:
        parts.append(" ".join(args.prompt))
    if not parts:
        return None
    return " ".join(p for p in parts if p.strip())


def parse_options(items: list[str]) -> JSONObject:
    """``-o name=value`` pairs as typed parameters (the same names and checks as ``/set parameter``)."""
    from ..tui.commands import parse_parameter

    options: JSONObject = {}
    for item in items:
        name, sep, raw = item.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"-o {item!r}: expected NAME=VALUE, e.g. -o temperature=0.2")
        try:
            value = parse_parameter(name.strip(), raw.strip())
            options[name.strip().lower()] = [*value] if isinstance(value, list) else value
        except InvalidRequest as exc:
            raise ConfigError(f"-o {item!r}: {exc}") from None
    return options


def generate_once(client: Client, model: str, prompt: str, args: argparse.Namespace) -> int:
    import time

    from ..tui.backend import ReplyStats

    fields: JSONObject = {}
    if args.system:
        fields["system"] = args.system
    if args.format:
        fields["format"] = args.format
    if args.think is not None:
        fields["think"] = args.think
    if args.keepalive is not None:
        fields["keep_alive"] = args.keepalive
    if args.options:
        fields["options"] = args.options
    if not prompt.strip():
        # Like Ollama: an empty prompt only loads the model.
        for _ in client.generate(model, "", **fields):
            pass
        return 0
    started = time.monotonic()
    ttft: float | None = None
    ended_with_newline = True
    stats: ReplyStats | None = None
    out = sys.stdout
    thoughts = ThinkingWriter(None if args.hidethinking else out if out.isatty() else sys.stderr)
    try:
        for chunk in client.generate(model, prompt, **fields):
            text, thinking = str(chunk.get("response") or ""), str(chunk.get("thinking") or "")
            if (text or thinking) and ttft is None:
                ttft = time.monotonic() - started
            if thinking:
                thoughts.write(thinking)
            if text:
                thoughts.close()
                ended_with_newline = text.endswith("\n")  # before writing: Ctrl+C may come during the write
                out.write(text)
                out.flush()
            if chunk.get("done"):
                stats = ReplyStats.from_done(chunk, ttft)
    finally:
        # Also on Ctrl+C (exit 130) or an error: the shell prompt must not follow the partial answer.
        thoughts.close()
        if not ended_with_newline:
            out.write("\n")
        out.flush()
    if args.verbose and stats is not None:
        _err("\n".join(stats.verbose_lines()))
    return 0


class ThinkingWriter:
    """A thinking model's reasoning in a one-shot answer, framed as ``ollama run`` frames it:
    ``Thinking...``, the reasoning, ``...done thinking.`` and a blank line, then the answer.

    It goes to stdout on a terminal (dimmed, unless ``NO_COLOR`` is set, rich's rule everywhere else
    in the CLI), to stderr when stdout is piped (so stdout holds only the answer and nothing is
    lost), and nowhere with ``--hidethinking`` (``stream`` None).
    """

    def __init__(self, stream: TextIO | None) -> None:
        self.stream, self.open, self.ends_line = stream, False, True
        self.dim = stream is not None and stream.isatty() and not os.environ.get("NO_COLOR")

    def write(self, text: str) -> None:
        if self.stream is None:
            return
        if not self.open:
            self.open = True
            self.stream.write("\x1b[2mThinking...\n" if self.dim else "Thinking...\n")
        self.stream.write(text)
        self.ends_line = text.endswith("\n")
        self.stream.flush()

    def close(self) -> None:
        """End the reasoning (before the answer's first text, or when the reply ends): once."""
        if self.stream is None or not self.open:
            return
        self.open = False
        self.stream.write(("" if self.ends_line else "\n") + "...done thinking.\n\n" + ("\x1b[0m" if self.dim else ""))
        self.stream.flush()
        self.stream = None  # a model that thinks again after answering: its answer stays whole


def run(args: argparse.Namespace) -> int:
    from ..tui.commands import think_setting

    model = args.model or config.STARTER_MODEL
    if args.keepalive is not None:
        config.parse_duration(args.keepalive, "--keepalive")  # bad value: exit 2 before any work
    if args.think is not None:
        try:
            args.think = think_setting(args.think)
        except InvalidRequest as exc:
            raise ConfigError(f"--think: {exc}") from None
    args.options = parse_options(args.option)
    prompt = read_prompt(args)
    client = connect()
    try:
        ensure_model(client, model)
        chats = check_can_chat(client, model, one_shot=prompt is not None)
        if prompt is not None:
            return generate_once(client, model, prompt, args) if chats else embed_once(client, model, prompt)
        if not sys.stdout.isatty():
            raise InvalidRequest("the chat needs a terminal; give a PROMPT or pipe input to answer once")
    finally:
        client.close()
    return chat(model, args)


def chat(model: str, args: argparse.Namespace) -> int:
    from ..tui.app import LocalrunApp
    from ..tui.backend import ClientBackend
    from ..tui.conversations import ConversationStore
    from ..tui.session import ChatSession
    from .connect import ensure_daemon

    store = None if args.no_save else ConversationStore()
    session = ChatSession.start(model, system=args.system, options=args.options, store=store, format=args.format,
                                verbose=args.verbose, keep_alive=args.keepalive, think=args.think,
                                hide_thinking=args.hidethinking)
    restart = (lambda: ensure_daemon().close()) if config.host().is_loopback else None
    app = LocalrunApp(ClientBackend(), session=session, conversations=store, restart_daemon=restart)
    code = app.run()
    return int(code or 0)


"""Model store commands: ``pull``, ``create``, ``list``/``ls``, ``show``, ``cp``, ``rm``, ``verify``, ``import-ollama``.

When a daemon answers at LOCALRUN_HOST, ``pull``, ``create``, ``list``, ``cp`` and ``rm`` go
through it (:mod:`localrun.client`), so it unloads what is removed and shows the same store;
otherwise they call :class:`localrun.store.ModelStore` directly. Output follows Ollama's: a
``NAME ID SIZE MODIFIED`` table, progress bars for transfers, ``Error: ...`` with exit code 1 on
failure (main.py prints LocalrunErrors).
Colour follows rich's rules: none when NO_COLOR is set or stdout is not a terminal.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

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

from .. import config
from ..errors import InvalidName, InvalidRequest, LocalrunError, ModelNotFound
from ..fmt import human_ago, human_bytes
from ..jsontypes import JSONObject, JSONValue, as_number, as_object

if TYPE_CHECKING:  # imported where used, to keep `localrun --help` fast
    from ..client import Client
    from ..store import ModelStore
    from ..store.progress import Progress as StoreProgress

_SHOW_FLAGS = ("modelfile", "parameters", "template", "system", "license")


def _store() -> ModelStore:
    from ..store import ModelStore

    return ModelStore(config.models_dir())


def _daemon() -> Client | None:
    """A client of the running daemon, or None when none answers (then the store is used directly)."""
    from .connect import running_daemon

    return running_daemon()


def _progress(chunk: JSONObject) -> StoreProgress:
    from ..store import Progress as StoreProgress

    digest, total, completed = chunk.get("digest"), chunk.get("total"), chunk.get("completed")
    return StoreProgress(str(chunk.get("status", "")), digest if isinstance(digest, str) else None,
                         total if isinstance(total, int) else None, completed if isinstance(completed, int) else None)


def _console(stderr: bool = False) -> Console:
    return Console(stderr=stderr, highlight=False, soft_wrap=True)


class ProgressView:
    """Renders store Progress reports: a bar for transfers, a line for each other status."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.bars = Progress(
            TextColumn("{task.description}"),
            BarColumn(bar_width=25),
            DownloadColumn(binary_units=False),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            console=console,
            transient=False,
        )
        self.tasks: dict[str, TaskID] = {}
        self.last_status: str | None = None
        self.started = False

    def __enter__(self) -> ProgressView:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.started:
            self.bars.stop()

    def __call__(self, p: StoreProgress) -> None:
        if p.total and p.completed is not None and not self.console.is_terminal:
            # No live bar in a pipe or log: one line when a transfer starts and one when it ends.
            label = _label(p)
            if p.status != self.last_status:
                self.last_status = p.status
                self.console.print(f"{label}: {human_bytes(p.total)}")
            elif p.completed >= p.total and label not in self.tasks:
                self.tasks[label] = TaskID(0)
                self.console.print(f"{label}: {human_bytes(p.total)} done")
            return
        if p.total and p.completed is not None:
            key = f"{p.status}:{p.digest or ''}"
            if key not in self.tasks:
                if not self.started:
                    self.bars.start()
                    self.started = True
                label = _label(p)
                self.tasks[key] = self.bars.add_task(label, total=p.total)
            self.bars.update(self.tasks[key], completed=p.completed)
            self.last_status = p.status
            return
        if p.status != self.last_status:
            self.last_status = p.status
            self.bars.console.print(p.status)


def _label(p: StoreProgress) -> str:
    """Short bar label like Ollama's ``pulling a5fd3b62230a``."""
    if not p.digest:
        return str(p.status)
    verb = {"downloading": "pulling"}.get(p.status, str(p.status).split()[0])
    return f"{verb} {p.digest.removeprefix('sha256:')[:12]}"


def cmd_pull(args: argparse.Namespace) -> int:
    from ..store import pull

    daemon = _daemon()
    if daemon is not None:
        with daemon, ProgressView(_console(stderr=True)) as view:
            for chunk in daemon.pull(args.model):
                view(_progress(chunk))
        return 0
    store = _store()
    with ProgressView(_console(stderr=True)) as view:
        pull(store, args.model, progress=view)
    return 0


def cmd_create(args: argparse.Namespace) -> int:
    from ..store import Progress as StoreProgress
    from ..store import hub_hook

    if args.quantize is not None:
        from ..store.quantize import quant_type

        args.quantize = quant_type(args.quantize)  # a typo fails before any upload
    path = Path(args.file).expanduser()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidRequest(f"no Modelfile at {path} (give one with -f)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidRequest(f"cannot read the Modelfile {path}: {exc}") from None
    daemon = _daemon()
    if daemon is not None:
        with daemon, ProgressView(_console(stderr=True)) as view:
            view(StoreProgress("parsing modelfile"))
            for chunk in daemon.create(args.model, text, base_dir=str(path.resolve().parent), quantize=args.quantize):
                view(_progress(chunk))
        return 0
    store = _store()
    with ProgressView(_console(stderr=True)) as view:
        view(StoreProgress("parsing modelfile"))
        store.create(args.model, text, base_dir=path.resolve().parent, progress=view, from_hook=hub_hook(store),
                     quantize=args.quantize)
    return 0


def format_table(headers: list[str], rows: list[list[str]], gap: int = 4) -> str:
    """Plain aligned columns like Ollama's tabwriter output (no trailing spaces)."""
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    lines = []
    for row in [headers, *rows]:
        cells = [str(c).ljust(w + gap) for c, w in zip(row, widths, strict=False)]
        lines.append("".join(cells).rstrip())
    return "\n".join(lines) + "\n"


BASE_NOTE = "base model: completion only"


def _upstream_row(m: JSONObject) -> list[str]:
    """A model an upstream serves (``localrun upstream``): no size or date here, where it is served instead."""
    return [str(m["name"]), "-", "-", "-", f"upstream: {m.get('remote_host')}"]


def cmd_list(args: argparse.Namespace) -> int:
    """Ollama's table; a base (completion-only) model gets a note after its row's last column."""
    now = time.time()
    daemon = _daemon()
    if daemon is not None:
        with daemon:
            rows = [_upstream_row(m) if m.get("remote_host") else
                    [str(m["name"]), str(m.get("digest", "")).removeprefix("sha256:")[:12],
                     human_bytes(int(as_number(m.get("size")) or 0)), human_ago(_timestamp(m.get("modified_at")), now),
                     _note(bool(as_object(m.get("details")).get("base_model")),
                           "clip" in _families(m), str(as_object(m.get("details")).get("kind") or ""))]
                    for m in daemon.list()]
    else:
        rows = [[e.name, e.id, human_bytes(e.size), human_ago(e.modified, now),
                 _note(e.base_model, e.vision, str(e.kind))] for e in _store().list()]
    sys.stdout.write(format_table(["NAME", "ID", "SIZE", "MODIFIED", ""], rows))
    return 0


def _families(row: JSONObject) -> list[JSONValue]:
    families = as_object(row.get("details")).get("families")
    return families if isinstance(families, list) else []


KIND_NOTES = {"embedding": "embedding model (vectors, no chat)", "rerank": "reranker (scores documents, no chat)"}


def _note(base_model: bool, vision: bool, kind: str = "") -> str:
    """The last column of a ``list`` row: what an embedding model or a reranker is, a base model's note,
    or that the model takes images."""
    return KIND_NOTES.get(kind) or (BASE_NOTE if base_model else "vision (takes images)" if vision else "")


def _param_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return str(value)


def cmd_show(args: argparse.Namespace) -> int:
    try:
        details = _store().show(args.model)
    except (ModelNotFound, InvalidName):  # an upstream's own model names need not be valid store names
        if "/" in args.model and _show_upstream(args.model):  # NAME/model: an upstream the daemon serves
            return 0
        raise
    out = sys.stdout
    chosen = [f for f in _SHOW_FLAGS if getattr(args, f, False)]
    if len(chosen) > 1:
        raise InvalidRequest("give only one of --" + ", --".join(_SHOW_FLAGS))
    if chosen:
        what = chosen[0]
        if what == "modelfile":
            out.write(details.modelfile)
        elif what == "parameters":
            for key in sorted(details.parameters):
                value = details.parameters[key]
                for item in value if isinstance(value, list) else [value]:
                    out.write(f"{key:<30} {_param_text(item)}\n")
        elif what == "template":
            out.write((details.template or "")
                      + ("\n" if details.template and not details.template.endswith("\n") else ""))
        elif what == "system":
            out.write((details.system or "") + ("\n" if details.system else ""))
        elif what == "license":
            out.write("\n\n".join(details.licenses) + ("\n" if details.licenses else ""))
        return 0
    console = _console()
    d = details.details
    _section(console, "Model", [
        ("architecture", str(d.get("family") or "-")),
        ("parameters", str(d.get("parameter_size") or "-")),
        ("context length", str(d.get("context_length") or "-")),
        ("quantization", str(d.get("quantization_level") or "-")),
        ("template", {"modelfile": "from the Modelfile", "gguf": "from the GGUF", "none": "none"}[
            details.template_source]),
        *([("kind", KIND_NOTES[str(d["kind"])])] if str(d.get("kind")) in KIND_NOTES else
          [("kind", f"{BASE_NOTE} (it continues text; chat with {config.STARTER_MODEL})")]
          if d.get("base_model") else []),
    ])
    if details.projector_path is not None:
        _section(console, "Projector", [("vision", "takes images"),
                                        ("size", human_bytes(details.projector_path.stat().st_size))])
    params = [(k, _param_text(v)) for k, value in sorted(details.parameters.items())
              for v in (value if isinstance(value, list) else [value])]
    if params:
        _section(console, "Parameters", params)
    if details.system:
        _section(console, "System", [(line, "") for line in details.system.splitlines()[:10]])
    if details.messages:
        _section(console, "Messages", [(m.role, m.content.splitlines()[0][:60] if m.content else "")
                                        for m in details.messages])
    if details.licenses:
        _section(console, "License", [(line, "") for line in details.licenses[0].splitlines()[:3]])
    return 0


def _show_upstream(name: str) -> bool:
    """Print where the running daemon's upstream model ``name`` is served (its /api/show);
    False when no daemon answers or ``name`` is not an upstream model there."""
    daemon = _daemon()
    if daemon is None:
        return False
    with daemon:
        try:
            shown = daemon.show(name)
        except LocalrunError:
            return False
    upstream, hosts = shown.get("upstream"), shown.get("upstream_hosts")
    if not isinstance(upstream, str):
        return False
    _section(_console(), "Upstream", [
        ("pool", upstream),
        ("model there", str(shown.get("remote_model") or "-")),
        ("capabilities", ", ".join(str(c) for c in caps) if isinstance(caps := shown.get("capabilities"), list)
         else "-"),
        *[("served at", str(host)) for host in (hosts if isinstance(hosts, list) else [])],
    ])
    return True


def _section(console: Console, title: str, rows: list[tuple[str, str]]) -> None:
    width = max(len(k) for k, _ in rows) + 4
    lines = [f"  {title}"] + [f"    {k.ljust(width)}{v}".rstrip() for k, v in rows]
    sys.stdout.write("\n".join(lines) + "\n\n")


def _timestamp(iso: JSONValue) -> float:
    import datetime as dt

    try:
        return dt.datetime.fromisoformat(str(iso).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return time.time()


def cmd_copy(args: argparse.Namespace) -> int:
    daemon = _daemon()
    if daemon is not None:
        with daemon:
            daemon.copy(args.source, args.destination)
        print(f"copied '{args.source}' to '{args.destination}'")
        return 0
    entry = _store().copy(args.source, args.destination)
    print(f"copied '{args.source}' to '{entry.name}'")
    return 0


def cmd_remove(args: argparse.Namespace) -> int:
    daemon = _daemon()
    remove = daemon.delete if daemon is not None else _store().remove  # the daemon also unloads it
    failed = 0
    for name in args.models:
        try:
            remove(name)
        except LocalrunError as exc:
            if len(args.models) == 1:
                raise
            print(f"Error: {exc}", file=sys.stderr)
            failed += 1
            continue
        print(f"deleted '{name}'")
    return 1 if failed else 0


def cmd_import_ollama(args: argparse.Namespace) -> int:
    from ..store import ImportStatus, import_ollama

    source = Path(args.source).expanduser() if args.source else None
    results = import_ollama(_store(), source, force=args.force)
    sys.stdout.write(format_table(["NAME", "STATUS", "DETAIL"], [[r.name, r.status.value, r.detail] for r in results]))
    console = _console()
    imported = sum(r.status is ImportStatus.IMPORTED for r in results)
    console.print(f"{imported} model{'s' if imported != 1 else ''} imported")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    """Hash every stored blob (of the named models, default all); ``--repair`` fixes what it can."""
    from ..store import integrity

    store = _store()
    with ProgressView(_console(stderr=True)) as view:
        checks = integrity.check(store, args.models or None, progress=view)
        if args.repair:
            checks = integrity.repair(store, checks, progress=view)
    rows = [[", ".join(c.models), c.digest[7:19], "ok" if c.problem is None else "repaired" if c.repaired
             else "CORRUPT", c.hint or c.problem or ""] for c in checks]
    sys.stdout.write(format_table(["MODEL", "BLOB", "STATUS", "DETAIL"], rows))
    bad = [c for c in checks if not c.sound]
    if bad and not args.repair:
        print(f"{len(bad)} corrupt blob{'s' if len(bad) != 1 else ''}: run `localrun verify --repair`",
              file=sys.stderr)
    return 1 if bad else 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("pull", help="download a model (hf.co/user/repo[:quant] or a curated name)")
    p.add_argument("model")
    p.set_defaults(func=cmd_pull)

    p = subparsers.add_parser("create", help="create a model from a Modelfile")
    p.add_argument("model")
    p.add_argument("-f", "--file", default="Modelfile", help="the Modelfile (default: ./Modelfile)")
    p.add_argument("-q", "--quantize", metavar="TYPE",
                   help="quantize F32/F16/BF16 weights to TYPE on the way (e.g. q4_K_M, q8_0), as llama-quantize does")
    p.set_defaults(func=cmd_create)

    p = subparsers.add_parser("list", aliases=["ls"], help="list models")
    p.set_defaults(func=cmd_list)

    p = subparsers.add_parser("show", help="show a model's details")
    p.add_argument("model")
    for flag in _SHOW_FLAGS:
        p.add_argument(f"--{flag}", action="store_true", help=f"print only the {flag}")
    p.set_defaults(func=cmd_show)

    p = subparsers.add_parser("cp", help="copy a model under a new name")
    p.add_argument("source")
    p.add_argument("destination")
    p.set_defaults(func=cmd_copy)

    p = subparsers.add_parser("rm", help="remove models")
    p.add_argument("models", nargs="+", metavar="MODEL")
    p.set_defaults(func=cmd_remove)

    p = subparsers.add_parser("verify", help="hash stored models against their digests (--repair fixes them)")
    p.add_argument("models", nargs="*", metavar="MODEL", help="the models to check (default: all)")
    p.add_argument("--repair", action="store_true",
                   help="delete corrupt blobs and download again those that came from the hub")
    p.set_defaults(func=cmd_verify)

    p = subparsers.add_parser("import-ollama", help="adopt the models of an Ollama store (hard links, no download)")
    p.add_argument("--from", dest="source", help="the Ollama models dir (default: $OLLAMA_MODELS or ~/.ollama/models)")
    p.add_argument("--force", action="store_true", help="replace models here that have the same name")
    p.set_defaults(func=cmd_import_ollama)

"""``localrun info [--json]``: what this installation can run on, read locally (no daemon needed)."""

from __future__ import annotations

import argparse
import json
import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..fmt import binary_bytes
from ..jsontypes import JSONObject, as_number

if TYPE_CHECKING:  # the report's module is imported when the command runs
    from ..hardware.sysinfo import BuildReport, Info


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser("info", help="show versions, the llama.cpp build, devices, CPU features and the store")
    p.add_argument("--json", action="store_true", help="print the report as JSON (the same as GET /api/info)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..hardware.sysinfo import collect_info

    info = collect_info()
    print(json.dumps(info, indent=2) if args.json else render(info))
    return 0


def _rpc(build: BuildReport, settings: JSONObject) -> str:
    """Whether this build has llama.cpp's RPC backend, and the workers LOCALRUN_RPC_SERVERS names."""
    servers = settings.get("rpc_servers")
    workers = ", ".join(str(s) for s in servers) if isinstance(servers, list) else ""
    if not build.get("supports_rpc"):
        return "not in this build" + (f" (LOCALRUN_RPC_SERVERS={workers} cannot work)" if workers else "")
    return f"yes; layers split over {workers} (LOCALRUN_RPC_SERVERS)" if workers else "yes; no workers set"


def render(info: Info) -> str:
    """The human-readable report (sections of aligned ``key: value`` lines)."""
    lines: list[str] = []

    def section(title: str, rows: Sequence[tuple[str, object]]) -> None:
        lines.append(title)
        width = max((len(k) for k, _ in rows), default=0)
        lines.extend(f"  {k + ':':<{width + 1}} {v}" for k, v in rows)
        lines.append("")

    lr, lc, build, cpu = info["localrun"], info["llama_cpp"], info["build"], info["cpu"]
    section("localrun", [("version", lr["version"]), ("python", f"{lr['python']} ({lr['executable']})"),
                         ("platform", lr["platform"])])
    commit = f", commit {lc['ggml_commit']}" if lc.get("ggml_commit") else ""
    section("llama.cpp", [
        ("llama-cpp-python", lc.get("llama_cpp_python") or "not installed"),
        ("ggml", f"{lc.get('ggml_version') or '?'}{commit}"),
        ("libllama", lc.get("llama_version") or "?"),
        ("build backend", build.get("backend") or "unknown"),
        ("registered", ", ".join(build.get("registered_backends") or []) or "-"),
        ("GPU offload", "yes" if build.get("supports_gpu_offload") else "no"),
        ("RPC", _rpc(build, info.get("settings") or {})),
    ])
    rows = [(str(d["name"]), f"{str(d['kind']).upper():5} {binary_bytes(as_number(d['free_bytes']))} free of "
             f"{binary_bytes(as_number(d['total_bytes']))}  {d.get('description', '')}") for d in info["devices"]]
    section("devices", rows or [("none", "the device probe failed (see errors)")])
    if info["host_gpus"]:
        section("GPUs on this machine", [(str(g["vendor"]), f"{g['name']} (found by {g['source']})")
                                         for g in info["host_gpus"]])
    features = [k for k, on in cpu["features"].items() if on and k not in ("OPENMP", "REPACK", "LLAMAFILE")]
    section("cpu", [
        ("model", cpu.get("model") or "?"),
        ("cores", f"{cpu.get('cores_physical') or '?'} physical, {cpu.get('cores_logical') or '?'} logical"),
        ("llama.cpp uses", " ".join(features) or "?"),
        ("CPU flags", " ".join(cpu["flags"]) or "-"),
        ("memory", f"{binary_bytes(info['memory']['available_bytes'])} available of "
                   f"{binary_bytes(info['memory']['total_bytes'])}"),
    ])
    for w in info["workarounds"]:
        state = "active" if w["active"] else "off"
        lines.append(f"workaround {w['setting']} ({state}{', needed on this CPU' if w['applies'] else ''})")
        lines.extend(textwrap.wrap(w["reason"], 100, initial_indent="  ", subsequent_indent="  "))
        lines.append("")
    m = info["models"]
    if m:
        free = f", {binary_bytes(m['disk_free_bytes'])} free on disk" if m.get("disk_free_bytes") is not None else ""
        where = m["dir"] if m["exists"] else f"{m['dir']} (not created yet)"
        section("models", [("dir", where), ("used", f"{binary_bytes(m['used_bytes'])}{free}")])
    settings = info.get("settings") or {}
    if settings:
        section("settings", list(settings.items()))
    for text in info["advice"]:
        lines.append(f"NOTE: {text}")
        lines.append("")
    for text in info["errors"]:
        lines.append(f"problem: {text}")
    return "\n".join(lines).rstrip() + "\n"

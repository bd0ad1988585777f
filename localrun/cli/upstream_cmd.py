"""``localrun upstream add|list|rm``: other servers served behind this daemon as ``NAME/model``.

- ``add NAME URL [--api-key-env VAR] [--models a,b] [--api openai|ollama]``: saved in the
  upstreams file of the config dir (``localrun.upstream.registry``); the same NAME with another
  URL adds a member to that pool. The server is asked for its models once, to say what the
  daemon will serve (an unreachable one is still saved: the daemon keeps checking it).
- ``list``: the saved upstreams and those of LOCALRUN_UPSTREAMS, one member per line.
- ``rm NAME [URL]``: remove the pool, or only its member at URL.

A running daemon notices a change of the file within a second or two: no restart. Keys are never
written anywhere: ``--api-key-env`` names the variable (read from the daemon's environment).
"""

from __future__ import annotations

import argparse
import asyncio

from .. import config
from ..upstream import registry
from ..upstream.router import MemberSnapshot, Upstreams
from ..upstream.spec import UpstreamSpec, check_url, make_spec


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser(
        "upstream", help="serve other servers' models as NAME/model (pools, failover)",
        description="Put other inference servers (vLLM, SGLang, TGI, llama.cpp's server, LM Studio, another "
                    "localrun, Ollama) behind this daemon: their models appear as NAME/model in every API.")
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    a = sub.add_parser("add", help="add an upstream (or another member of the pool NAME)")
    a.add_argument("name", help="short lowercase name: models appear as NAME/model")
    a.add_argument("url", help="http(s)://host:port[/v1 | /api]")
    a.add_argument("--api-key-env", metavar="VAR",
                   help="environment variable (of the daemon) holding the key sent as Authorization: Bearer")
    a.add_argument("--models", metavar="A,B", help="serve only these models (default: what the server lists)")
    a.add_argument("--api", choices=("openai", "ollama"), help="the API to speak (default: from the URL, or ask)")
    a.set_defaults(func=add)
    ls = sub.add_parser("list", aliases=["ls"], help="the configured upstreams")
    ls.set_defaults(func=list_upstreams)
    r = sub.add_parser("rm", help="remove an upstream (or only its member at URL)")
    r.add_argument("name")
    r.add_argument("url", nargs="?")
    r.set_defaults(func=remove)


def _probe(spec: UpstreamSpec) -> MemberSnapshot:
    async def run() -> MemberSnapshot:
        upstreams = Upstreams([spec], None, api_key=config.upstream_api_key)
        try:
            await upstreams.refresh()
            return upstreams.snapshot()[0]
        finally:
            await upstreams.close()

    return asyncio.run(run())


def add(args: argparse.Namespace) -> int:
    spec = make_spec(args.name, args.url, api_key_env=args.api_key_env, models=args.models, api=args.api)
    path = config.upstreams_file()
    specs = registry.add(path, spec)
    members = sum(1 for s in specs if s.name == spec.name)
    print(f"added upstream {spec.name} ({spec.display_url})" + (f": {members} members" if members > 1 else "")
          + f", saved in {path}")
    state = _probe(spec)
    if state.state == "cooling":
        print(f"warning: {spec.display_url} cannot serve now ({state.last_error}); "
              "the daemon keeps checking it")
    else:
        models = ", ".join(f"{spec.name}/{m}" for m in state.models[:10])
        more = f" and {len(state.models) - 10} more" if len(state.models) > 10 else ""
        print(f"{spec.display_url} speaks {state.api}; models: {models or '(none listed)'}{more}")
    if spec.api_key_env and not config.upstream_api_key(spec.api_key_env):
        print(f"note: {spec.api_key_env} is not set in this shell; the daemon reads it from its own environment")
    return 0


def list_upstreams(args: argparse.Namespace) -> int:
    rows = [("NAME", "URL", "API", "KEY FROM", "MODELS", "SOURCE")]
    env = config.upstreams()
    saved = registry.load(config.upstreams_file())
    for spec, source in [(s, "LOCALRUN_UPSTREAMS") for s in env] + [(s, "config") for s in saved if s not in env]:
        rows.append((spec.name, spec.display_url, spec.api.value if spec.api else "auto", spec.api_key_env or "-",
                     ",".join(spec.models) if spec.models else "(listed)", source))
    if len(rows) == 1:
        print("no upstreams; add one with `localrun upstream add NAME URL`")
        return 0
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    print("\n".join("    ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)).rstrip() for r in rows))
    return 0


def remove(args: argparse.Namespace) -> int:
    url = check_url(args.url)[0] if args.url else None
    gone = registry.remove(config.upstreams_file(), args.name, url)
    for spec in gone:
        print(f"removed upstream {spec.name} ({spec.display_url})")
    return 0

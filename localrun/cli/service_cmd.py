"""``localrun service install|uninstall|status|show``: run the daemon at login (systemd, launchd, Windows)."""

from __future__ import annotations

import argparse
import sys

from . import autostart
from .autostart import ServiceKind, ServiceManager, ServiceSpec


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser("service", help="start the localrun daemon at login (systemd, launchd, Windows)")
    kind_help = "service manager (default: this OS's: systemd on Linux, launchd on macOS)"
    p.add_argument("--kind", choices=[k.value for k in ServiceKind], help=kind_help)
    # --kind is also accepted after the action (`service install --kind systemd`); SUPPRESS keeps a
    # value given before the action from being reset by the action's default.
    kind = argparse.ArgumentParser(add_help=False)
    kind.add_argument("--kind", choices=[k.value for k in ServiceKind], default=argparse.SUPPRESS, help=kind_help)
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    i = sub.add_parser("install", parents=[kind],
                       help="write the service file and start it (LOCALRUN_* settings are kept)")
    i.add_argument("--no-start", action="store_true", help="only write and enable it; start at next login")
    sub.add_parser("uninstall", parents=[kind], help="stop the service and remove its file")
    sub.add_parser("status", parents=[kind], help="is it installed, running, and does the daemon answer")
    sub.add_parser("show", parents=[kind], help="print the service file install would write")
    p.set_defaults(func=run)


def _manager(args: argparse.Namespace) -> ServiceManager:
    return ServiceManager(ServiceKind(args.kind) if args.kind else None)


def run(args: argparse.Namespace) -> int:
    manager = _manager(args)
    if args.action == "show":
        sys.stdout.write(autostart.render(manager.kind, ServiceSpec.current()).decode())
        return 0
    if args.action == "install":
        spec = ServiceSpec.current()
        result = manager.install(spec, start=not args.no_start)
        print(f"Wrote {result.path}")
        for cmd in result.done:
            print(f"Ran: {cmd}")
        if result.error:
            print(f"Error: {result.error}", file=sys.stderr)
        if result.todo:
            why = "" if result.error else " (no systemd user manager answers here)"
            print(f"To finish{why}, run:")
            for cmd in result.todo:
                print(f"  {cmd}")
        print(f"Logs: {spec.log_file}")
        if spec.has_secrets:
            print("The file holds LOCALRUN_API_KEY, so only you can read it.")
        return 1 if result.error else 0
    if args.action == "uninstall":
        result = manager.uninstall()
        for cmd in result.done:
            print(f"Ran: {cmd}")
        print(f"Removed {result.path}")
        for cmd in result.todo:
            print(f"To finish, run: {cmd}")
        return 0
    st = manager.status()
    print(f"service:   {st.kind.value}")
    print(f"file:      {st.path} ({'installed' if st.installed else 'not installed'})")
    none = "n/a (the Startup folder has no state)" if st.kind is ServiceKind.WINDOWS else \
        "unknown (no service manager answers)"
    print(f"state:     {st.state or none}")
    print(f"daemon:    {_daemon_state()}")
    return 0 if st.installed else 3  # 3: like `systemctl status` for a unit that is not there


def _daemon_state() -> str:
    from ..client import Client

    client = Client()
    try:
        running = client.is_running()
    finally:
        client.close()
    return f"answering at {client.base_url}" if running else f"not answering at {client.base_url}"

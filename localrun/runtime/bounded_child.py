"""The child side of :mod:`localrun.runtime.bounded`: run jobs under CPU and memory limits.

Started as ``python -m localrun.runtime.bounded_child '<limits as JSON>'``. It caps its address
space and disables core dumps once, then serves frames from stdin: for each job it first writes
:data:`~localrun.runtime.bounded.ACCEPTED` (the job is taken: from here on a death is the job's),
re-arms ``RLIMIT_CPU`` so that job may use ``cpu_seconds`` more (the kernel kills the process past
it), imports the named localrun function, calls it and writes ``{"ok": result}`` or ``{"error":
{"code", "message"}}`` to stdout (``code`` is a LocalrunError's, absent for any other failure).
A MemoryError is an error reply; the worker keeps serving.
Anything printed goes to stderr, so stdout carries frames only.
"""

from __future__ import annotations

import importlib
import json
import math
import sys
from typing import IO

from ..errors import BadFrame, FrameTooLarge, LocalrunError
from ..jsontypes import JSONObject, JSONValue, as_object
from .bounded import ACCEPTED, read_frame, write_frame

try:
    import resource
except ImportError:  # pragma: no cover - Windows: only the caller's wall-clock deadline applies
    resource = None  # type: ignore[assignment]


def _limit_memory(memory_bytes: int) -> None:
    if resource is None:
        return
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = memory_bytes if hard == resource.RLIM_INFINITY else min(memory_bytes, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


def _arm_cpu(cpu_seconds: int) -> None:
    """Allow this job ``cpu_seconds`` more CPU time than the process has used so far."""
    if resource is None:
        return
    usage = resource.getrusage(resource.RUSAGE_SELF)
    soft = math.ceil(usage.ru_utime + usage.ru_stime) + cpu_seconds
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def _execute(request: JSONObject) -> JSONObject:
    module_name, _, qualname = str(request.get("fn", "")).partition(":")
    args = request.get("args", [])
    if not module_name.startswith("localrun.") or not qualname.isidentifier() or not isinstance(args, list):
        return {"error": {"message": f"not a job: {request.get('fn')!r}"}}
    try:
        fn = getattr(importlib.import_module(module_name), qualname)
        result: JSONValue = fn(*args)  # write_frame checks that it is JSON
        return {"ok": result}
    except LocalrunError as exc:
        return {"error": {"code": exc.code, "message": exc.message}}
    except MemoryError:
        return {"error": {"message": "it needed more memory than it may use"}}
    except RecursionError:
        return {"error": {"message": "it recursed too deeply"}}
    except Exception as exc:
        return {"error": {"message": f"{type(exc).__name__}: {exc}"}}


def _next_job(stdin: IO[bytes]) -> JSONValue:
    """The next job, or None when the daemon is gone (its pipe closed, even inside a frame)."""
    try:
        return read_frame(stdin)
    except BadFrame:
        return None


def main() -> None:
    limits = json.loads(sys.argv[1])
    _limit_memory(int(limits["memory_bytes"]))
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # a stray print must not corrupt the frames
    while (request := _next_job(stdin)) is not None:
        write_frame(stdout, ACCEPTED)
        _arm_cpu(int(limits["cpu_seconds"]))
        reply = _execute(as_object(request))
        try:
            write_frame(stdout, reply)
        except (TypeError, ValueError, FrameTooLarge) as exc:  # the result was not JSON, or too large
            write_frame(stdout, {"error": {"message": f"unusable result: {exc}"}})


if __name__ == "__main__":
    main()

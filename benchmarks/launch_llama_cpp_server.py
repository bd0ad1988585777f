#!/usr/bin/env python3
"""Start llama-cpp-python's own server (``python -m llama_cpp.server``) as a benchmark baseline.

Identical to ``python -m llama_cpp.server ARGS...`` except for one switch: every model loaded
gets ``use_extra_bufts = False``. On CPUs that advertise AMX inside VMs that do not allow it,
llama.cpp's default "extra buffer types" (repacked AMX weights) crash the process with SIGSEGV in
``ggml_backend_amx_mul_mat`` on the first decode (see ../shared/ENGINE_NOTES.md); llama.cpp's own
tools call the same switch ``--no-repack``. The high-level ``Llama`` class does not expose it, so
this wraps ``llama_cpp.llama_model_default_params``, which ``Llama.__init__`` calls, before the
server creates its model. Needs the server extra: uvicorn, fastapi, sse-starlette,
starlette-context, pydantic-settings.

    python benchmarks/launch_llama_cpp_server.py --model MODEL.gguf --port 8000 --n_threads 2 --n_threads_batch 2
"""

from __future__ import annotations

import sys
from typing import Any

import llama_cpp.llama_cpp as lib

_default_params = lib.llama_model_default_params


def _params_without_extra_bufts() -> Any:
    params = _default_params()
    params.use_extra_bufts = False
    return params


def main() -> None:
    lib.llama_model_default_params = _params_without_extra_bufts
    from llama_cpp.server.__main__ import main as server_main

    sys.argv[0] = "llama_cpp.server"
    server_main()


if __name__ == "__main__":
    main()

"""Quantize a GGUF model with llama.cpp's own quantizer, in a child process of its own.

``python -m localrun.engine.quantize SOURCE DEST FTYPE`` writes ``DEST`` from ``SOURCE`` with
``llama_model_quantize`` to the file type ``FTYPE`` (llama.h's ``llama_ftype`` number, e.g. 15 for
Q4_K_M): what ``llama-quantize SOURCE DEST Q4_K_M`` does, the same library and default parameters,
so the same bytes. While it works it prints one JSON line per tensor to stdout,
``{"tensor": I, "tensors": N}``, and at the end ``{"done": true}``; on failure it exits non-zero with
llama.cpp's last log lines on stderr. It runs apart from the daemon because it takes minutes and
gigabytes for a real model, and a malformed file must not take the daemon down with it.
:mod:`localrun.store.quantize` drives it and owns which types are offered.
"""

from __future__ import annotations

import ctypes
import json
import re
import sys

_TENSOR_LINE = re.compile(r"\[\s*(\d+)\s*/\s*(\d+)\s*\]")


def main(argv: list[str]) -> int:
    if len(argv) != 3 or not argv[2].isdigit():
        print("usage: python -m localrun.engine.quantize SOURCE DEST FTYPE  (llama_ftype, e.g. 15 for Q4_K_M)",
              file=sys.stderr)
        return 2
    source, dest, ftype = argv[0], argv[1], int(argv[2])
    import llama_cpp as lc

    tail: list[str] = []

    def on_log(level: int, text: bytes, _user: object) -> None:
        line = text.decode("utf-8", "replace")
        match = _TENSOR_LINE.match(line.lstrip())
        if match:
            print(json.dumps({"tensor": int(match.group(1)), "tensors": int(match.group(2))}), flush=True)
        tail.append(line)
        del tail[:-40]

    callback = lc.llama_log_callback(on_log)  # kept referenced until the call returns
    lc.llama_log_set(callback, ctypes.c_void_p())
    lc.llama_backend_init()
    params = lc.llama_model_quantize_default_params()
    params.ftype = ftype
    status = lc.llama_model_quantize(source.encode(), dest.encode(), ctypes.byref(params))
    if status != 0:
        sys.stderr.write("".join(tail))
        print(f"llama_model_quantize failed with status {status}", file=sys.stderr)
        return 1
    print(json.dumps({"done": True}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""llama.cpp RPC workers: other hosts' ``rpc-server`` processes as devices a model's layers go to.

llama.cpp registers each worker as a device of its ``RPC`` backend (what ``llama-server --rpc``
does in ``common/arg.cpp``); a model loaded afterwards with layers offloaded spreads them over
every registered device in proportion to its free memory. The backend exists only in a build of
llama-cpp-python with ``-DGGML_RPC=on`` (packaging/README.md).

Registration is process-wide and cannot be undone: :func:`add_servers` registers each endpoint
once per process (a runner process loads one model, so in practice once). RPC traffic is
unauthenticated and unencrypted: workers belong on a private network.
"""

from __future__ import annotations

import ctypes
import logging
import socket
import threading

import llama_cpp as lc

from ..errors import EngineError

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 5.0  # seconds to reach a worker before the load fails (llama.cpp itself waits longer)

_lock = threading.Lock()
_registered: list[str] = []  # endpoints registered in this process, in order (guarded by _lock)
_AddServer = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)


def supported() -> bool:
    """Whether this llama-cpp-python was built with the RPC backend."""
    return bool(lc.llama_supports_rpc())


def registered() -> tuple[str, ...]:
    """The workers registered in this process so far."""
    with _lock:
        return tuple(_registered)


def add_servers(endpoints: tuple[str, ...]) -> None:
    """Register each ``host:port`` of ``endpoints`` not registered yet as an RPC device.

    Raises EngineError when the build has no RPC backend or a worker does not accept a connection
    (checked first: llama.cpp aborts the process on some connection failures).
    """
    if not endpoints:
        return
    if not supported():
        raise EngineError("LOCALRUN_RPC_SERVERS is set but this llama-cpp-python was built without RPC "
                          "(rebuild it with CMAKE_ARGS=-DGGML_RPC=on; packaging/README.md)")
    with _lock:
        new = [e for e in endpoints if e not in _registered]
        for endpoint in new:
            _check_reachable(endpoint)
        if not new:
            return
        add_server, register = _backend_functions()
        for endpoint in new:
            reg = add_server(endpoint.encode())
            if not reg:
                raise EngineError(f"llama.cpp could not add the RPC worker {endpoint}")
            register(reg)
            _registered.append(endpoint)
            log.info("RPC worker %s registered", endpoint)


def _check_reachable(endpoint: str) -> None:
    host, _, port = endpoint.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT):
            pass
    except OSError as exc:
        raise EngineError(f"RPC worker {endpoint} is not reachable ({exc.strerror or exc}); "
                          f"is rpc-server running there?") from exc


def _backend_functions() -> tuple[ctypes._CFuncPtr, ctypes._CFuncPtr]:  # type: ignore[name-defined]
    """``ggml_backend_rpc_add_server`` (found through the RPC backend) and ``ggml_backend_register``."""
    # Through libllama's own handle: a wheel install can hold libggml.so and libggml.so.0 as two
    # files, and llama_cpp._ggml loads the first; its backend registry is not the one libllama reads.
    lib = lc.llama_cpp._lib
    by_name = lib.ggml_backend_reg_by_name
    by_name.argtypes, by_name.restype = [ctypes.c_char_p], ctypes.c_void_p
    proc = lib.ggml_backend_reg_get_proc_address
    proc.argtypes, proc.restype = [ctypes.c_void_p, ctypes.c_char_p], ctypes.c_void_p
    register = lib.ggml_backend_register
    register.argtypes, register.restype = [ctypes.c_void_p], None
    rpc_reg = by_name(b"RPC")
    if not rpc_reg:
        raise EngineError("llama.cpp's RPC backend is not loaded (a build without -DGGML_RPC=on?)")
    address = proc(rpc_reg, b"ggml_backend_rpc_add_server")
    if not address:
        raise EngineError("this llama.cpp's RPC backend has no ggml_backend_rpc_add_server (too old a build)")
    return _AddServer(address), register

"""Ports for the daemons and servers the tests start on 127.0.0.1.

``bind(("127.0.0.1", 0))`` names a port free at that moment, and the kernel may name the same one
again once the socket is closed: a test that picks its daemon's port and then its peers' could get
one port twice, and the second daemon would fail to bind while its readiness check was answered by
the first (a cluster whose "front" was a peer). So one pytest run never hands out a port twice.
"""

from __future__ import annotations

import socket

_given: set[int] = set()


def free_port() -> int:
    """A port nothing listens on now and that this test run has not handed out before."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _given:
            _given.add(port)
            return port

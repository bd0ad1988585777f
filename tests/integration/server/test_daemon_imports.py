"""What the daemon and the CLI leave unimported, because every start paid for it.

The daemon reads model headers and decodes embeddings without numpy or the ``gguf`` package behind
it (~0.35 s of every start and of the first request for a model): the runner, which computes, is
what needs them. Neither the daemon nor a CLI command imports httpx's own command-line client
(click, rich and pygments: ~0.1 s of every ``localrun`` command)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_the_daemon_reads_headers_and_vectors_without_numpy_or_gguf(tiny_gguf: Path) -> None:
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "import localrun.server.app\n"
        "from localrun.engine.types import EmbedResult\n"
        "from localrun.runtime import protocol\n"
        "from localrun.store.gguf_file import read_gguf\n"
        f"info = read_gguf(Path({str(tiny_gguf)!r}))\n"
        "assert info.tensor_count > 0 and info.file_type, info\n"
        "sent = EmbedResult([[0.5, -1.25, 3.0], [0.0, 1e-3, -2.5]], 4, [False, True])\n"
        "got = protocol.decode_embed_result(protocol.encode_embed_result(sent))\n"
        "assert got.embeddings[0] == [0.5, -1.25, 3.0] and got.truncated == [False, True], got\n"
        "loaded = sorted({m.split('.')[0] for m in sys.modules} & {'numpy', 'gguf'})\n"
        "assert not loaded, f'the daemon imported {loaded}'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_httpx_comes_without_its_command_line_client() -> None:
    code = (
        "import sys\n"
        "import localrun.server.app\n"
        "import localrun.cli.daemon_cmds\n"
        "import localrun.client\n"
        "import httpx\n"
        "assert httpx.Client and httpx.AsyncClient and callable(httpx.main)\n"
        "loaded = sorted({m.split('.')[0] for m in sys.modules} & {'click', 'rich', 'pygments'})\n"
        "assert not loaded, f'imported {loaded}'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)

"""What a client sends to create a model from a Modelfile: its local files become blob digests.

The daemon's API never reads a path on its machine (see :mod:`localrun.store.create`), so the
client does what Ollama's does: it finds the files FROM and ADAPTER name, checks that each is a
GGUF whose header accounts for its length (so a huge sparse file is refused before it is hashed),
hashes each one, asks the daemon whether it holds that blob (``HEAD /api/blobs/<digest>``),
uploads only what it lacks, and sends the Modelfile rewritten to name the digests.

A file whose name is already its digest (``blobs/sha256-<hex>``, as ``show --modelfile`` prints
it) is not hashed here: the daemon checks the blob it holds, or verifies the upload.
Pure of HTTP: :mod:`localrun.client` does the requests.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from .blobs import sha256_steps
from .create import digest_ref, is_path_syntax, looks_like_path, resolve_path
from .gguf_file import read_gguf
from .modelfile import Modelfile, parse, render

HASH_CHUNK = 1 << 20
REPORT_EVERY = 64 << 20  # bytes hashed between two progress reports


@dataclass(frozen=True, slots=True)
class LocalFile:
    """One file a Modelfile names: ``what`` is FROM, ADAPTER or PROJECTOR (a second FROM), ``digest`` is known when the
    file's name is its digest (else it is hashed before the upload)."""

    what: str
    path: Path
    size: int
    digest: str | None


@dataclass(frozen=True, slots=True)
class UploadPlan:
    """A parsed Modelfile and the local files it names (none: send the text as it is)."""

    modelfile: Modelfile
    files: tuple[LocalFile, ...]

    def text(self, digests: Mapping[str, str]) -> str:
        """The Modelfile with each local file replaced by its digest (``digests`` by FROM/ADAPTER)."""
        mf = dataclasses.replace(self.modelfile,
                                 from_=digests.get("FROM", self.modelfile.from_),
                                 adapter=digests.get("ADAPTER", self.modelfile.adapter),
                                 projector=digests.get(PROJECTOR, self.modelfile.projector))
        return render(mf)


PROJECTOR = "FROM (projector)"  # a second FROM (a vision projector), as error messages name it


def plan_upload(text: str, base_dir: Path | None) -> UploadPlan:
    """Parse ``text`` and find the local files it names, relative to ``base_dir`` (the Modelfile's
    folder; None: only values written as paths count, relative to the working directory).

    Raises ModelfileError for a bad Modelfile or a missing file, InvalidModelFile for a file that
    is not a GGUF or whose length its header does not account for; nothing is hashed before that.
    """
    mf = parse(text)
    files: list[LocalFile] = []
    for what, value in (("FROM", mf.from_), ("ADAPTER", mf.adapter), (PROJECTOR, mf.projector)):
        if value is None:
            continue
        if base_dir is None and not is_path_syntax(value):
            continue
        where = base_dir if base_dir is not None else Path.cwd()
        if not looks_like_path(value, where):
            continue
        path = resolve_path(value, where, what)
        info = read_gguf(path)
        files.append(LocalFile(what, path, info.file_size, digest_ref(str(path))))
    return UploadPlan(mf, tuple(files))


def hash_steps(path: Path) -> Iterator[tuple[int, str | None]]:
    """Hash ``path``, yielding ``(bytes so far, None)`` every :data:`REPORT_EVERY` bytes and
    ``(size, "sha256:<hex>")`` last. Stopping the iteration stops the hashing."""
    return sha256_steps(path, REPORT_EVERY)


def file_chunks(path: Path, chunk: int = HASH_CHUNK) -> Iterator[bytes]:
    """The bytes of ``path`` in pieces, for a streamed upload."""
    with open(path, "rb") as f:
        while block := f.read(chunk):
            yield block

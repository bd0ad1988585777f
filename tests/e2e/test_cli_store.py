"""The store commands as a user runs them: `localrun pull/create/list/show/cp/rm/import-ollama`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakehub import FakeHub

from localrun.cli.main import main

ROOT = Path(__file__).resolve().parents[2]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def modelfile(tmp_path: Path, tiny_gguf: Path) -> Path:
    os.link(tiny_gguf, tmp_path / "tiny.gguf")
    path = tmp_path / "Modelfile"
    path.write_text('FROM ./tiny.gguf\nSYSTEM """You are a tiny test model."""\nPARAMETER temperature 0.3\n'
                    'PARAMETER stop "<|im_end|>"\nLICENSE MIT\n')
    return path


def test_create_list_show_cp_rm(capsys: pytest.CaptureFixture[str], modelfile: Path) -> None:
    code, out, err = run(capsys, "create", "tiny", "-f", str(modelfile))
    assert code == 0 and "success" in err

    code, out, _ = run(capsys, "list")
    lines = out.splitlines()
    assert re.match(r"NAME\s+ID\s+SIZE\s+MODIFIED$", lines[0])
    assert re.match(r"tiny:latest\s+[0-9a-f]{12}\s+\d+ KB\s+(Less than a second|\d+ seconds?) ago$", lines[1]), lines
    assert lines[0].index("ID") == lines[1].index(lines[1].split()[1])  # columns aligned

    code, out, _ = run(capsys, "show", "tiny", "--modelfile")
    assert "FROM " in out and "PARAMETER temperature 0.3" in out and "You are a tiny test model." in out
    assert run(capsys, "show", "tiny", "--system")[1] == "You are a tiny test model.\n"
    assert run(capsys, "show", "tiny", "--license")[1] == "MIT\n"
    assert 'stop                           "<|im_end|>"' in run(capsys, "show", "tiny", "--parameters")[1]
    assert "im_start" in run(capsys, "show", "tiny", "--template")[1]  # the GGUF's own template
    code, out, _ = run(capsys, "show", "tiny")
    assert "architecture      llama" in out and "temperature    0.3" in out

    assert run(capsys, "cp", "tiny", "tiny-copy")[1] == "copied 'tiny' to 'tiny-copy:latest'\n"
    assert run(capsys, "rm", "tiny")[1] == "deleted 'tiny'\n"
    out = run(capsys, "ls")[1]
    assert "tiny-copy:latest" in out and "tiny:latest" not in out
    run(capsys, "rm", "tiny-copy")
    assert run(capsys, "list")[1].strip() == "NAME    ID    SIZE    MODIFIED"


def test_create_quantizes_and_a_bad_type_fails_before_any_work(capsys: pytest.CaptureFixture[str],
                                                                 modelfile: Path) -> None:
    code, _, err = run(capsys, "create", "tiny-q", "-f", str(modelfile), "-q", "q8_0")
    assert code == 0 and "quantizing F32 model to Q8_0" in err and "success" in err
    code, out, _ = run(capsys, "show", "tiny-q")
    assert code == 0 and re.search(r"quantization\s+Q8_0", out)
    code, _, err = run(capsys, "create", "tiny-x", "-f", str(modelfile), "-q", "q9")
    assert code == 1 and "unsupported quantization type 'q9'" in err and "hashing" not in err
    run(capsys, "rm", "tiny-q")


def test_show_modelfile_output_creates_the_same_model(capsys: pytest.CaptureFixture[str], modelfile: Path,
                                                      tmp_path: Path) -> None:
    run(capsys, "create", "tiny", "-f", str(modelfile))
    exported = tmp_path / "Exported"
    exported.write_text(run(capsys, "show", "tiny", "--modelfile")[1])
    assert run(capsys, "create", "tiny2", "-f", str(exported))[0] == 0
    ids = {line.split()[0]: line.split()[1] for line in run(capsys, "list")[1].splitlines()[1:]}
    assert ids["tiny:latest"] == ids["tiny2:latest"]


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["show", "nothere"], "model 'nothere:latest' not found"),
        (["rm", "nothere"], "is not in the store"),
        (["cp", "nothere", "x"], "not found"),
        (["pull", "../../etc/passwd"], "invalid model name"),
        (["pull", "nothing-curated:1b"], "not a curated model"),
        (["create", "x", "-f", "/no/such/Modelfile"], "no Modelfile at"),
    ],
)
def test_errors_exit_1_with_a_message(capsys: pytest.CaptureFixture[str], argv: list[str], fragment: str) -> None:
    code, _out, err = run(capsys, *argv)
    assert code == 1
    assert err.startswith("Error: ") and fragment in err


def test_bad_model_files_leave_the_store_unchanged(capsys: pytest.CaptureFixture[str], modelfile: Path,
                                                  tmp_path: Path, tiny_gguf: Path) -> None:
    run(capsys, "create", "tiny", "-f", str(modelfile))
    before = run(capsys, "list")[1]
    (tmp_path / "cut.gguf").write_bytes(tiny_gguf.read_bytes()[:1000])
    (tmp_path / "text.gguf").write_text("hello")
    cases = {
        "FROM ./cut.gguf\n": "truncated",
        "FROM ./text.gguf\n": "not a GGUF file",
        "FROM ./tiny.gguf\nPARAMETER top_k many\n": "line 2: parameter 'top_k' expects a whole number",
        'FROM ./tiny.gguf\nSYSTEM """never closed\n': 'line 2: unterminated """',
    }
    for text, fragment in cases.items():
        bad = tmp_path / "Bad"
        bad.write_text(text)
        code, _, err = run(capsys, "create", "tiny", "-f", str(bad))
        assert code == 1 and fragment in err, (text, err)
    assert run(capsys, "list")[1] == before


@pytest.fixture
def hub(tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    with FakeHub() as h:
        h.add_file("org/Tiny-GGUF", "tiny-Q4_K_M.gguf", tiny_gguf.read_bytes())
        monkeypatch.setenv("HF_ENDPOINT", h.url)
        yield h


def test_pull_from_the_hub_in_a_subprocess(hub: FakeHub, tmp_path: Path) -> None:
    env = {**os.environ, "NO_COLOR": "1"}
    cmd = [sys.executable, "-m", "localrun"]
    done = subprocess.run([*cmd, "pull", "hf.co/org/Tiny-GGUF"], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "pulling manifest" in done.stderr and "success" in done.stderr
    assert "\x1b[" not in done.stdout + done.stderr  # NO_COLOR / not a terminal: plain text
    listed = subprocess.run([*cmd, "list"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert "hf.co/org/Tiny-GGUF:latest" in listed.stdout
    again = subprocess.run([*cmd, "pull", "hf.co/org/Tiny-GGUF:latest"], env=env, cwd=ROOT, capture_output=True,
                           text=True, timeout=60)
    assert again.returncode == 0 and "already up to date" in again.stderr
    assert len(hub.downloads("tiny-Q4_K_M.gguf")) == 1


def test_import_ollama(capsys: pytest.CaptureFixture[str], tmp_path: Path, tiny_gguf: Path,
                       monkeypatch: pytest.MonkeyPatch) -> None:
    import hashlib
    import json

    root = tmp_path / "ollama"
    (root / "blobs").mkdir(parents=True)

    def blob(data: bytes) -> dict[str, object]:
        d = "sha256:" + hashlib.sha256(data).hexdigest()
        (root / "blobs" / d.replace(":", "-")).write_bytes(data)
        return {"digest": d, "size": len(data)}

    manifest = {
        "schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json", **blob(b"{}")},
        "layers": [{"mediaType": "application/vnd.ollama.image.model", **blob(tiny_gguf.read_bytes())},
                   {"mediaType": "application/vnd.ollama.image.system", **blob(b"From Ollama.")}],
    }
    path = root / "manifests" / "registry.ollama.ai" / "library" / "tinyllama" / "latest"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(manifest))
    monkeypatch.setenv("OLLAMA_MODELS", str(root))
    code, out, _ = run(capsys, "import-ollama")
    assert code == 0 and re.search(r"tinyllama:latest\s+imported", out) and "1 model imported" in out
    assert run(capsys, "show", "tinyllama", "--system")[1] == "From Ollama.\n"


@pytest.mark.starter
def test_pull_starter_then_show(capsys: pytest.CaptureFixture[str], gemma_gguf: Path) -> None:
    code, _, err = run(capsys, "pull", "gemma3:270m")
    assert code == 0 and "success" in err
    out = run(capsys, "list")[1]
    assert re.search(r"gemma3:270m\s+[0-9a-f]{12}\s+253 MB\s+.*base model: completion only", out)
    shown = run(capsys, "show", "gemma3:270m")[1]
    assert re.search(r"kind\s+base model: completion only \(it continues text; chat with qwen2.5-coder:0.5b\)", shown)
    mf = run(capsys, "show", "gemma3:270m", "--modelfile")[1]
    assert "<start_of_turn>" in mf and 'PARAMETER stop "<end_of_turn>"' in mf

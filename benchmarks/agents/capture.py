"""Capture what coding agents send a model server, for ``benchmarks/agent_replay.py`` (issue #25 point 5).

    python benchmarks/agents/capture.py --bin DIR [--out benchmarks/agents/captures] [--agents claude codex opencode]

DIR holds the agents' executables, e.g. after ``cd /tmp/agents && npm install
@anthropic-ai/claude-code @openai/codex opencode-ai``: ``/tmp/agents/node_modules/.bin``.

For each agent: a stand-in server (``standin.py``) on a free port, a throwaway HOME and a small
git project (``main.py``), then two turns of a conversation, run with the command line and
environment ``localrun launch`` gives the agent (``launch_cmd.plan``), pointed at the stand-in:

1. ``What does main.py print? ...``: the agent's first request of a session;
2. the same session continued (``claude --continue``, ``codex exec resume --last``,
   ``opencode run --continue``) with ``Add a subtract function to main.py.``: the first request's
   messages, the stand-in's reply and the new user message, as the agent sends them.

Side requests are left out (opencode's title request: the one without tools). Each kept request is
written as ``OUT/AGENT/turnN.json``: ``{"agent", "version", "path", "turn", "body"}``, with local
details replaced: the temporary folders by ``/home/user`` and ``/home/user/project`` (also in the
``-home-user-project`` form Claude Code names its memory folder by), the user name, the host name
and Claude Code's device id. The script fails if any of them is left in what it writes.
Needs the project's virtualenv (it imports ``localrun.cli.launch_cmd``) and takes about a minute.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from localrun.cli.launch_cmd import AGENTS, plan

HERE = Path(__file__).resolve().parent
MODEL = "qwen2.5-coder:7b"  # a name only: the stand-in answers for any model
REPLY = "main.py prints 5: it calls add(2, 3) and prints the result."
PROMPTS = ("What does main.py print? Answer in one sentence.", "Add a subtract function to main.py.")
CONTINUE = {"claude": ["--continue"], "codex": ["exec", "resume", "--last"], "opencode": ["run", "--continue"]}
FIRST = {"claude": [], "codex": ["exec"], "opencode": ["run"]}
PROJECT_FILES = {"main.py": "def add(a, b):\n    return a + b\n\n\nprint(add(2, 3))\n",
                 "README.md": "# calc\n\nA tiny calculator.\n"}
FAKE_HOME, FAKE_PROJECT = "/home/user", "/home/user/project"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_project(root: Path) -> tuple[Path, Path]:
    """A HOME and a git project in it; returns (home, project)."""
    home, project = root / "home", root / "home" / "project"
    project.mkdir(parents=True)
    for name, text in PROJECT_FILES.items():
        (project / name).write_text(text)
    git = ["git", "-c", "user.name=user", "-c", "user.email=user@example.com"]
    subprocess.run([*git, "init", "-q", "-b", "main"], cwd=project, check=True)
    subprocess.run([*git, "add", "."], cwd=project, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "calc"], cwd=project, check=True)
    return home, project


def run_turns(name: str, exe: Path, base_url: str, home: Path, project: Path) -> None:
    """Both turns of ``name``'s conversation, with ``localrun launch``'s command line and environment."""
    env = {**os.environ, "HOME": str(home), "CODEX_HOME": str(home / ".codex"),
           "XDG_CONFIG_HOME": str(home / ".config"), "XDG_DATA_HOME": str(home / ".local" / "share"),
           "XDG_CACHE_HOME": str(home / ".cache"), "XDG_STATE_HOME": str(home / ".local" / "state")}
    (home / ".codex").mkdir(exist_ok=True)
    for args, prompt in ((FIRST[name], PROMPTS[0]), (CONTINUE[name], PROMPTS[1])):
        extra = ["-p", prompt, *args] if name == "claude" else [*args, prompt]
        launch = plan(AGENTS[name], exe, MODEL, base_url, None, extra)
        done = subprocess.run(launch.argv, env=launch.environment(env), cwd=project, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise SystemExit(f"{name} failed ({done.returncode}): {done.stderr[-2000:]}")


def replacements(root: Path, home: Path, project: Path) -> list[tuple[str, str]]:
    """(local text, stand-in) pairs, longest first; paths also in the form Claude Code names
    its project folders by (each character but letters and digits a ``-``).

    The user's name is replaced only inside a home path (``/home/NAME``): as a word it may be
    prompt text ("root" is both a user and a word the agents' prompts use).
    """
    pairs = [(str(project), FAKE_PROJECT), (str(home), FAKE_HOME), (str(root), "/tmp/work")]
    pairs += [(re.sub(r"[^A-Za-z0-9]", "-", old), new.replace("/", "-")) for old, new in pairs]
    user = getpass.getuser()
    pairs += [(f"{Path.home()}/", f"{FAKE_HOME}/"), (f"/home/{user}", FAKE_HOME), (f"/Users/{user}", FAKE_HOME)]
    return pairs


def host_word() -> re.Pattern[str] | None:
    """The host name as a whole word (None when too short to tell from other text)."""
    name = socket.gethostname()
    return re.compile(rf"(?<![A-Za-z0-9_.-]){re.escape(name)}(?![A-Za-z0-9_-])") if len(name) >= 4 else None


def strip(text: str, pairs: list[tuple[str, str]]) -> str:
    for old, new in pairs:
        text = text.replace(old, new)
    text = re.sub(r'(device_id\\*":\\*")[0-9a-f]{16,}', lambda m: m.group(1) + "0" * 64, text)
    host = host_word()
    return host.sub("host", text) if host else text


def collect(name: str, saved: Path, version: str, pairs: list[tuple[str, str]], out: Path) -> list[Path]:
    """The agent's main-loop requests (those with tools), stripped, as ``out/name/turnN.json``."""
    kept = []
    for path in sorted(saved.glob("*.json")):
        record: dict[str, Any] = json.loads(path.read_text())
        if record["method"] == "POST" and isinstance(record["body"], dict) and record["body"].get("tools"):
            kept.append(record)
    if len(kept) != 2:
        raise SystemExit(f"{name}: expected 2 main-loop requests, got {len(kept)} (see {saved})")
    (out / name).mkdir(parents=True, exist_ok=True)
    written = []
    for turn, record in enumerate(kept, 1):
        capture = {"agent": name, "version": version, "path": record["path"].split("?")[0], "turn": turn,
                   "body": record["body"]}
        target = out / name / f"turn{turn}.json"
        target.write_text(strip(json.dumps(capture, indent=1, ensure_ascii=False), pairs) + "\n")
        written.append(target)
    return written


def check_clean(files: list[Path], pairs: list[tuple[str, str]]) -> None:
    """Fail when a local path or the host name is left in ``files``."""
    host = host_word()
    for path in files:
        text = path.read_text()
        left = [old for old, _ in pairs if old in text]
        if host and host.search(text):
            left.append(socket.gethostname())
        if left:
            raise SystemExit(f"{path}: still holds {left}")


def capture(name: str, bin_dir: Path, out: Path, keep: bool) -> list[Path]:
    exe = bin_dir / AGENTS[name].executable
    version = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=60).stdout.strip()
    root = Path(tempfile.mkdtemp(prefix=f"capture-{name}-"))
    home, project = make_project(root)
    saved, port = root / "requests", free_port()
    server = subprocess.Popen([sys.executable, str(HERE / "standin.py"), "--port", str(port), "--out", str(saved),
                               "--reply", REPLY], stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        run_turns(name, exe, f"http://127.0.0.1:{port}", home, project)
        pairs = replacements(root, home, project)
        written = collect(name, saved, version, pairs, out)
        check_clean(written, pairs)
        return written
    finally:
        server.terminate()
        server.wait(10)
        if not keep:
            shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin", type=Path, required=True, help="folder with the claude, codex, opencode executables")
    parser.add_argument("--out", type=Path, default=HERE / "captures")
    parser.add_argument("--agents", nargs="+", default=["claude", "codex", "opencode"], choices=sorted(AGENTS))
    parser.add_argument("--keep", action="store_true", help="keep the temporary HOME and raw requests")
    args = parser.parse_args()
    for name in args.agents:
        for path in capture(name, args.bin, args.out, args.keep):
            print(f"{path}: {path.stat().st_size // 1024} KiB")


if __name__ == "__main__":
    main()

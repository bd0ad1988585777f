"""Switch A->B->A->B with LOCALRUN_MAX_LOADED_MODELS=1 and LOCALRUN_TRACE; print TTFT and load stage times."""
import json, os, subprocess, sys, time, socket, tempfile, signal, glob
from pathlib import Path
import httpx
PY = "/work/main/.venv/bin/python"
src = sys.argv[1]; out = Path(sys.argv[2]); out.mkdir(parents=True, exist_ok=True)
models = {"a": sys.argv[3], "b": sys.argv[4]}
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
home = Path(tempfile.mkdtemp(prefix="sw", dir="/tmp/i15c"))
env = {**os.environ, "PYTHONPATH": src, "HOME": str(home), "LOCALRUN_MODELS": str(home / "models"),
       "LOCALRUN_HOST": f"127.0.0.1:{port}", "LOCALRUN_MAX_LOADED_MODELS": "1", "LOCALRUN_TRACE": str(out / "trace"),
       "XDG_CACHE_HOME": str(home / "cache"), "XDG_DATA_HOME": str(home / "data")}
for k, p in models.items():
    (home / f"Modelfile.{k}").write_text(f"FROM {p}\n")
    subprocess.run([PY, "-m", "localrun", "create", k, "-f", str(home / f"Modelfile.{k}")], env=env, check=True, capture_output=True)
    Path(p).read_bytes()
d = subprocess.Popen([PY, "-m", "localrun", "serve"], env=env, stdout=open(out / "serve.log", "w"), stderr=subprocess.STDOUT, start_new_session=True)
try:
    for _ in range(200):
        try:
            httpx.get(f"http://127.0.0.1:{port}/api/version", timeout=1); break
        except Exception: time.sleep(0.2)
    res = []
    for name in ["a", "b", "a", "b", "a", "b"]:
        t0 = time.monotonic_ns()
        with httpx.stream("POST", f"http://127.0.0.1:{port}/api/generate", json={"model": name, "prompt": "Why is the sky blue?", "options": {"num_predict": 4}}, timeout=120) as r:
            t1 = None
            for line in r.iter_lines():
                if line.strip() and t1 is None:
                    t1 = time.monotonic_ns()
        res.append((name, t0, t1))
        print(f"{name}: first token {(t1 - t0) / 1e9:.2f} s", flush=True)
        time.sleep(1)
finally:
    os.killpg(d.pid, signal.SIGTERM); d.wait(30)
time.sleep(1)
marks = []
for f in glob.glob(str(out / "trace" / "*.jsonl")):
    pid = f.split("-")[-1].split(".")[0]
    for line in open(f):
        t, stage, key, val = json.loads(line)
        marks.append((t, stage, key, val, pid))
marks.sort()
want = {"load_start", "runner_spawn", "runner_spawned", "runner_main", "load_frame", "factory_imported", "model_loaded", "context_created", "prefix_restored", "engine_built", "load_done", "step", "decoded", "prefilled"}
for name, t0, t1 in res:
    print(f"--- {name} ({(t1 - t0)/1e6:.0f} ms)")
    seen = set()
    for t, stage, key, val, pid in marks:
        if t0 <= t <= t1 and (stage, pid) not in seen:
            seen.add((stage, pid))
            print(f"  {(t - t0)/1e6:8.1f} ms  {stage} {key} {val} [{pid}]")

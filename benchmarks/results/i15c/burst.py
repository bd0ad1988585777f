import sys, time, threading, statistics, os
from localrun.engine.engine import Engine
from localrun.engine.types import LoadOptions, GenerateRequest, SamplingOptions, TokenEvent, DoneEvent
path, mode = sys.argv[1], sys.argv[2]
e = Engine(path, LoadOptions(num_ctx=4096, num_parallel=16))
base = e.tokenize("The quick brown fox jumps over the lazy dog. " * 400, add_special=False)
def prompt(i, n):
    return [e.vocab.bos if e.vocab.bos >= 0 else 0] + [(t + 7 * i) % 150000 for t in base[: n - 1]]
# warm-up
for ev in e.submit(GenerateRequest(prompt(99, 16), SamplingOptions(num_predict=2, temperature=0))):
    pass
def run(n_req, n_tok, n_out):
    ttft, t0s = [None] * n_req, []
    handles = []
    start = time.perf_counter()
    for i in range(n_req):
        handles.append(e.submit(GenerateRequest(prompt(i + int(start * 1000) % 1000, n_tok), SamplingOptions(num_predict=n_out, temperature=0, ignore_eos=True))))
        time.sleep(0.0015)  # requests reach a runner ~1-2 ms apart through the daemon
    def drain(i, h):
        for ev in h:
            if ttft[i] is None and isinstance(ev, TokenEvent):
                ttft[i] = time.perf_counter() - start
    ts = [threading.Thread(target=drain, args=(i, h)) for i, h in enumerate(handles)]
    [t.start() for t in ts]; [t.join() for t in ts]
    total = time.perf_counter() - start
    s = sorted(ttft)
    return s[len(s) // 2], s[-1], n_req * n_out / total, total
if mode == "burst":
    p50, mx, tps, tot = run(8, 128, 32)
    print(f"burst8 TTFT p50 {p50:.2f} max {mx:.2f} agg {tps:.1f} tok/s total {tot:.1f}s", flush=True)
else:
    p50, mx, tps, tot = run(1, 2000, 4)
    print(f"long2000 TTFT {p50:.2f}s", flush=True)
os._exit(0)

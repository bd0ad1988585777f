"""Cost of one decode step with S sequences x R rows each (R-1 draft rows), all rows with logits."""
import json, os, sys, time
import llama_cpp as lc
path = sys.argv[1]
quiet = lc.llama_log_callback(lambda *_: None); lc.llama_log_set(quiet, None)
lc.llama_backend_init()
mp = lc.llama_model_default_params(); mp.use_extra_bufts = os.environ.get("REPACK") == "1"
model = lc.llama_model_load_from_file(path.encode(), mp)
cp = lc.llama_context_default_params()
cp.n_seq_max = 16; cp.kv_unified = True; cp.n_ctx = 16 * 400; cp.n_batch = cp.n_ubatch = 512
cp.n_threads = cp.n_threads_batch = os.cpu_count()
ctx = lc.llama_init_from_model(model, cp); mem = lc.llama_get_memory(ctx)
batch = lc.llama_batch_init(512, 0, 1)
def decode(items):
    batch.n_tokens = len(items)
    for i, (seq, pos, tok, out) in enumerate(items):
        batch.token[i], batch.pos[i], batch.n_seq_id[i] = tok, pos, 1
        batch.seq_id[i][0], batch.logits[i] = seq, out
    assert lc.llama_decode(ctx, batch) == 0
P = 128
for S in (1, 2, 4, 8, 16):
    lc.llama_memory_clear(mem, True)
    for s in range(S):
        decode([(s, p, 100 + (p * 7 + s) % 1000, p == P - 1) for p in range(P)])
    res = {}
    nxt = P
    for R in (1, 2, 3, 5):
        steps = 24
        t0 = time.perf_counter()
        for k in range(steps):
            pos = nxt; nxt += 1
            decode([(s, pos + r, 200 + k + r, True) for s in range(S) for r in range(R)])
            for s in range(S):
                lc.llama_memory_seq_rm(mem, s, pos + 1, -1)  # keep one row, as a rejected draft would
        res[R] = round((time.perf_counter() - t0) / steps * 1000, 1)
    print(json.dumps({"seqs": S, "step_ms_by_rows_per_seq": res,
                      "ratio_vs_1": {r: round(v / res[1], 2) for r, v in res.items()}}), flush=True)

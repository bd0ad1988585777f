"""Write a random-weight llama GGUF (F16) of about 1B parameters, fast: a parameterised copy of
tests/tinymodel.py's write_tiny_gguf (same metadata and SentencePiece-style vocabulary, padded with
filler tokens to n_vocab). Weights are windows of one pool of random numbers (generating ~1e9
independent normals would take too long); the timing does not care.

Usage: python gen_model.py OUT.gguf [--n-embd 2048 --n-layer 16 --n-ff 5632 --n-vocab 32000
                                     --n-head 32 --n-head-kv 8 --ctx 4096]
Imports numpy/gguf only: never import llama_cpp in this process (no need), and run it as its own process.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from gguf import GGUFWriter, LlamaFileType, TokenType

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from tinymodel import CHATML_TOOLS_TEMPLATE, _vocab  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--n-embd", type=int, default=2048)
    ap.add_argument("--n-layer", type=int, default=16)
    ap.add_argument("--n-ff", type=int, default=5632)
    ap.add_argument("--n-vocab", type=int, default=32000)
    ap.add_argument("--n-head", type=int, default=32)
    ap.add_argument("--n-head-kv", type=int, default=8)
    ap.add_argument("--ctx", type=int, default=4096)
    a = ap.parse_args()
    t0 = time.perf_counter()
    tokens, scores, types = _vocab(("<|im_start|>", "<|im_end|>"))
    i = 0
    while len(tokens) < a.n_vocab:
        tokens.append(f"<filler{i}>")
        scores.append(0.0)
        types.append(TokenType.NORMAL)
        i += 1
    n_vocab = len(tokens)
    head_dim = a.n_embd // a.n_head
    kv_dim = head_dim * a.n_head_kv

    w = GGUFWriter(a.out, "llama")
    w.add_name("rand-llama")
    w.add_context_length(a.ctx)
    w.add_embedding_length(a.n_embd)
    w.add_block_count(a.n_layer)
    w.add_feed_forward_length(a.n_ff)
    w.add_head_count(a.n_head)
    w.add_head_count_kv(a.n_head_kv)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(10000.0)
    w.add_file_type(LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_chat_template(CHATML_TOOLS_TEMPLATE)

    rng = np.random.default_rng(0)
    biggest = max(n_vocab * a.n_embd, a.n_ff * a.n_embd)
    pool = rng.standard_normal(biggest + (1 << 20), dtype=np.float32).astype(np.float16)
    pools = {s: (pool * np.float16(s)) for s in (1.0, 0.02)}

    def t(shape: tuple[int, int], scale: float) -> np.ndarray:
        n = shape[0] * shape[1]
        off = int(rng.integers(0, pool.size - n + 1))
        return pools[scale][off: off + n].reshape(shape)

    ones = np.ones(a.n_embd, dtype=np.float32)
    # numpy shapes are (rows, cols) = ggml's (ne1, ne0). Embedding and output at std 1: wide logit
    # gaps (few near-ties that kernels could round either way); the blocks at std 0.02.
    w.add_tensor("token_embd.weight", t((n_vocab, a.n_embd), 1.0))
    w.add_tensor("output_norm.weight", ones)
    w.add_tensor("output.weight", t((n_vocab, a.n_embd), 1.0))
    n_params = 2 * n_vocab * a.n_embd
    for b in range(a.n_layer):
        p = f"blk.{b}."
        w.add_tensor(p + "attn_norm.weight", ones)
        w.add_tensor(p + "attn_q.weight", t((a.n_embd, a.n_embd), 0.02))
        w.add_tensor(p + "attn_k.weight", t((kv_dim, a.n_embd), 0.02))
        w.add_tensor(p + "attn_v.weight", t((kv_dim, a.n_embd), 0.02))
        w.add_tensor(p + "attn_output.weight", t((a.n_embd, a.n_embd), 0.02))
        w.add_tensor(p + "ffn_norm.weight", ones)
        w.add_tensor(p + "ffn_gate.weight", t((a.n_ff, a.n_embd), 0.02))
        w.add_tensor(p + "ffn_up.weight", t((a.n_ff, a.n_embd), 0.02))
        w.add_tensor(p + "ffn_down.weight", t((a.n_embd, a.n_ff), 0.02))
        n_params += 2 * a.n_embd * a.n_embd + 2 * kv_dim * a.n_embd + 3 * a.n_ff * a.n_embd
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    size = Path(a.out).stat().st_size
    print(f"gen_model: {a.out} n_vocab={n_vocab} params={n_params / 1e9:.3f}B size={size / 2**30:.2f}GiB "
          f"in {time.perf_counter() - t0:.1f}s", flush=True)


if __name__ == "__main__":
    main()

"""Write a random-weight Llama-3-8B-shaped GGUF in Q4_K_M, fast (issue #29 point 5, the GPU run).

    python gen_q4km.py OUT.gguf [--vocab-from tokenizer.json.gz|model.gguf] [--n-embd 4096 --n-layer 32
                                 --n-ff 14336 --n-head 32 --n-head-kv 8 --ctx 8192 --seed 0]
    python gen_q4km.py --export-vocab tokenizer.json.gz --vocab-from model.gguf   (prepare.sh does this)

The tokenizer is a real one, copied from another GGUF (``tokenizer.*`` keys: model, pre-tokenizer,
tokens, types, merges, special ids, chat template), so prompts tokenize as text does; by default the
Qwen2.5 tokenizer (151,936 tokens) that prepare.sh exports next to this script. Llama 3 has 128,256:
the output layer here is 18 % wider, the rest is the 8B shape (8.2B parameters, ~4.9 GB).

Tensor types follow llama.cpp's Q4_K_M recipe (``llama_tensor_get_type``): Q4_K everywhere,
``attn_v`` and ``ffn_down`` in Q6_K on the layers ``use_more_bits`` picks (the first and last
eighth and every third between: 16 of 32), ``token_embd`` Q4_K, ``output`` Q6_K, norms F32.

The blocks are not quantized from anything: their quant bytes are random (windows of one pool of
random bytes, at random offsets), and each block's scale fields are set to fixed values that make
the weights zero-mean with a chosen standard deviation (1/sqrt(fan-in) for the projections, 1 for
the embeddings), so activations stay finite through the layers:
- Q4_K (144 bytes: f16 d, f16 dmin, 12 bytes of 6-bit scales/mins, 128 bytes of 4-bit quants):
  every sub-block gets scale 8 and min 60 with dmin = d, so w = 8 d (q - 7.5), q uniform in 0..15;
- Q6_K (210 bytes: 128 ql, 64 qh, 16 int8 scales, f16 d): scales 16, w = 16 d (q - 32), q in 0..63
  (mean -0.5: a 3 % bias, harmless).
Tensors are streamed to the file one at a time (GGUFWriter's tensor-info API): memory is the largest
tensor (~0.5 GB), the time is the disk's.

Imports numpy and gguf only (gguf imports yaml); run it as its own process.
"""

from __future__ import annotations

import argparse
import gzip
import json
import time
from pathlib import Path

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFWriter, LlamaFileType

Q4_K, Q6_K = GGMLQuantizationType.Q4_K, GGMLQuantizationType.Q6_K
QK = 256
HERE = Path(__file__).resolve().parent

# Q4_K sub-block scale 8 and min 8 * 7.5 = 60 for all 8 sub-blocks, packed as get_scale_min_k4 reads them:
# j < 4: sc = s[j] & 63, m = s[j+4] & 63; j >= 4: sc = (s[j+4] & 15) | (s[j-4] >> 6) << 4,
# m = (s[j+4] >> 4) | (s[j] >> 6) << 4.
Q4K_SCALES = np.array([8] * 4 + [60 | (60 >> 4) << 6] * 4 + [(8 & 15) | (60 & 15) << 4] * 4, dtype=np.uint8)
Q4K_STD_PER_D = 8 * float(np.std(np.arange(16) - 7.5))     # 36.9: std of w / d
Q6K_SCALE = 16
Q6K_STD_PER_D = Q6K_SCALE * float(np.std(np.arange(64) - 32))  # 295.5


def _check_scales() -> None:
    s = Q4K_SCALES.astype(int)
    for j in range(8):
        if j < 4:
            sc, m = s[j] & 63, s[j + 4] & 63
        else:
            sc, m = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4), (s[j + 4] >> 4) | ((s[j] >> 6) << 4)
        assert (sc, m) == (8, 60), (j, sc, m)


def use_more_bits(i: int, n: int) -> bool:
    """llama.cpp (src/llama-quant.cpp): the layers Q4_K_M gives Q6_K attn_v / ffn_down."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def load_vocab(path: Path) -> dict:
    """The tokenizer keys, from an exported .json(.gz) or from any GGUF."""
    if path.suffix == ".gguf":
        from gguf import GGUFReader

        r = GGUFReader(str(path))
        out: dict = {}
        for key, field in r.fields.items():
            if key.startswith("tokenizer."):
                out[key] = field.contents()
        return out
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)


class Pool:
    """Random bytes to cut blocks from: one pool, windows at random offsets (fresh bytes for 4.9 GB
    would cost more than the disk write)."""

    def __init__(self, rng: np.random.Generator, size: int) -> None:
        self.rng = rng
        self.data = np.frombuffer(rng.bytes(size), dtype=np.uint8)

    def blocks(self, n_blocks: int, block_bytes: int) -> np.ndarray:
        n = n_blocks * block_bytes
        out = np.empty(n, dtype=np.uint8)
        done = 0
        while done < n:
            take = min(n - done, self.data.size // 2)
            off = int(self.rng.integers(0, self.data.size - take + 1))
            out[done:done + take] = self.data[off:off + take]
            done += take
        return out.reshape(n_blocks, block_bytes)


def q4k(pool: Pool, rows: int, cols: int, std: float) -> np.ndarray:
    assert cols % QK == 0, f"Q4_K rows need a multiple of {QK} values, got {cols}"
    nb = rows * cols // QK
    b = pool.blocks(nb, GGML_QUANT_SIZES[Q4_K][1])
    d = np.float16(std / Q4K_STD_PER_D)
    b[:, 0:4] = np.array([d, d], dtype=np.float16).view(np.uint8)  # d, dmin
    b[:, 4:16] = Q4K_SCALES
    return b.reshape(rows, -1)


def q6k(pool: Pool, rows: int, cols: int, std: float) -> np.ndarray:
    assert cols % QK == 0, f"Q6_K rows need a multiple of {QK} values, got {cols}"
    nb = rows * cols // QK
    b = pool.blocks(nb, GGML_QUANT_SIZES[Q6_K][1])
    b[:, 192:208] = Q6K_SCALE
    b[:, 208:210] = np.array([std / Q6K_STD_PER_D], dtype=np.float16).view(np.uint8)
    return b.reshape(rows, -1)


def add_vocab(w: GGUFWriter, v: dict) -> int:
    tokens = v["tokenizer.ggml.tokens"]
    w.add_tokenizer_model(v["tokenizer.ggml.model"])
    if "tokenizer.ggml.pre" in v:
        w.add_tokenizer_pre(v["tokenizer.ggml.pre"])
    w.add_token_list(tokens)
    if "tokenizer.ggml.token_type" in v:
        w.add_token_types(v["tokenizer.ggml.token_type"])
    if "tokenizer.ggml.scores" in v:
        w.add_token_scores(v["tokenizer.ggml.scores"])
    if "tokenizer.ggml.merges" in v:
        w.add_token_merges(v["tokenizer.ggml.merges"])
    for key, add in (("bos_token_id", w.add_bos_token_id), ("eos_token_id", w.add_eos_token_id),
                     ("padding_token_id", w.add_pad_token_id), ("unknown_token_id", w.add_unk_token_id),
                     ("eot_token_id", w.add_eot_token_id)):
        if f"tokenizer.ggml.{key}" in v:
            add(int(v[f"tokenizer.ggml.{key}"]))
    for key, add in (("add_bos_token", w.add_add_bos_token), ("add_eos_token", w.add_add_eos_token)):
        if f"tokenizer.ggml.{key}" in v:
            add(bool(v[f"tokenizer.ggml.{key}"]))
    if "tokenizer.chat_template" in v:
        w.add_chat_template(v["tokenizer.chat_template"])
    return len(tokens)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", nargs="?")
    ap.add_argument("--vocab-from", type=Path, default=HERE / "tokenizer.json.gz")
    ap.add_argument("--export-vocab", type=Path, help="write the tokenizer keys of --vocab-from here and stop")
    ap.add_argument("--n-embd", type=int, default=4096)
    ap.add_argument("--n-layer", type=int, default=32)
    ap.add_argument("--n-ff", type=int, default=14336)
    ap.add_argument("--n-head", type=int, default=32)
    ap.add_argument("--n-head-kv", type=int, default=8)
    ap.add_argument("--ctx", type=int, default=8192)
    ap.add_argument("--rope-base", type=float, default=500000.0)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    t0 = time.perf_counter()
    _check_scales()
    vocab = load_vocab(a.vocab_from)
    if a.export_vocab:
        with gzip.open(a.export_vocab, "wt", encoding="utf-8", compresslevel=9) as f:
            json.dump(vocab, f, ensure_ascii=False)
        n_tokens = len(vocab["tokenizer.ggml.tokens"])
        print(f"gen_q4km: {len(vocab)} tokenizer keys ({n_tokens} tokens) -> {a.export_vocab}")
        return
    if not a.out:
        ap.error("OUT.gguf is required")
    E, F, L = a.n_embd, a.n_ff, a.n_layer
    head_dim = E // a.n_head
    kv_dim = head_dim * a.n_head_kv

    w = GGUFWriter(a.out, "llama")
    w.add_name(f"rand-llama-{L}L-{E}-q4km")
    w.add_context_length(a.ctx)
    w.add_embedding_length(E)
    w.add_block_count(L)
    w.add_feed_forward_length(F)
    w.add_head_count(a.n_head)
    w.add_head_count_kv(a.n_head_kv)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(a.rope_base)
    w.add_file_type(LlamaFileType.MOSTLY_Q4_K_M)
    w.add_quantization_version(2)
    n_vocab = add_vocab(w, vocab)
    w.add_vocab_size(n_vocab)

    # (name, rows, cols, type, std): numpy (rows, cols) = ggml (ne1, ne0); rows of `cols` values are quantized
    plan: list[tuple[str, int, int, GGMLQuantizationType | None, float]] = [
        ("token_embd.weight", n_vocab, E, Q4_K, 1.0),
        ("output_norm.weight", 1, E, None, 1.0),
        ("output.weight", n_vocab, E, Q6_K, E ** -0.5),
    ]
    for i in range(L):
        p = f"blk.{i}."
        more = use_more_bits(i, L)
        plan += [
            (p + "attn_norm.weight", 1, E, None, 1.0),
            (p + "attn_q.weight", E, E, Q4_K, E ** -0.5),
            (p + "attn_k.weight", kv_dim, E, Q4_K, E ** -0.5),
            (p + "attn_v.weight", kv_dim, E, Q6_K if more else Q4_K, E ** -0.5),
            (p + "attn_output.weight", E, E, Q4_K, E ** -0.5),
            (p + "ffn_norm.weight", 1, E, None, 1.0),
            (p + "ffn_gate.weight", F, E, Q4_K, E ** -0.5),
            (p + "ffn_up.weight", F, E, Q4_K, E ** -0.5),
            (p + "ffn_down.weight", E, F, Q6_K if more else Q4_K, F ** -0.5),
        ]
    n_params = 0
    for name, rows, cols, qtype, _ in plan:
        n_params += rows * cols
        if qtype is None:
            w.add_tensor_info(name, (cols,), np.dtype(np.float32), cols * 4)
        else:
            row_bytes = cols // QK * GGML_QUANT_SIZES[qtype][1]
            w.add_tensor_info(name, (rows, row_bytes), np.dtype(np.uint8), rows * row_bytes, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    t_head = time.perf_counter()

    rng = np.random.default_rng(a.seed)
    pool = Pool(rng, 64 << 20)
    ones = np.ones(E, dtype=np.float32)
    for _name, rows, cols, qtype, std in plan:
        if qtype is None:
            w.write_tensor_data(ones)
        else:
            w.write_tensor_data((q4k if qtype == Q4_K else q6k)(pool, rows, cols, std))
    w.close()
    size = Path(a.out).stat().st_size
    print(f"gen_q4km: {a.out} n_vocab={n_vocab} layers={L} n_embd={E} n_ff={F} params={n_params / 1e9:.2f}B "
          f"size={size / 1e9:.2f}GB in {time.perf_counter() - t0:.1f}s (metadata {t_head - t0:.1f}s)", flush=True)


if __name__ == "__main__":
    main()

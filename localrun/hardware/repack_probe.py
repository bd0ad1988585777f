"""The repack probe's child process (repack.py): decode with repacked weights; exit 0 if that works.

Writes a small random-weight llama in the quantisations llama.cpp's repacking and AMX kernels take
(Q4_0, Q8_0, Q4_K), at shapes those kernels accept, loads it with ``use_extra_bufts`` on, and
decodes a prompt batch and a single token. A CPU that cannot run them dies here, not in a runner.

    python -m localrun.hardware.repack_probe DIRECTORY

The model is written into DIRECTORY, which the caller removes (repack.probe): on the CPUs this
looks for, the process dies before it could.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

N_EMBD, N_FF, N_HEAD, N_VOCAB = 512, 1536, 8, 512
Q4K_BLOCK, Q4K_BYTES = 256, 144  # weights per Q4_K block, bytes per block


def _q4_k(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """Random Q4_K blocks with small positive scales (gguf-py cannot quantise to K-quants)."""
    blocks = rng.integers(0, 256, size=(rows, cols // Q4K_BLOCK, Q4K_BYTES), dtype=np.uint8)
    blocks[:, :, 0:2] = np.frombuffer(np.float16(0.002).tobytes(), dtype=np.uint8)  # d
    blocks[:, :, 2:4] = np.frombuffer(np.float16(0.001).tobytes(), dtype=np.uint8)  # dmin
    return blocks.reshape(rows, -1)


def write_model(path: Path) -> None:
    from gguf import GGMLQuantizationType as Q
    from gguf import GGUFWriter, LlamaFileType, TokenType, quants

    rng = np.random.default_rng(0)
    w = GGUFWriter(str(path), "llama")
    for add, value in ((w.add_context_length, 256), (w.add_embedding_length, N_EMBD), (w.add_block_count, 1),
                       (w.add_feed_forward_length, N_FF), (w.add_head_count, N_HEAD), (w.add_head_count_kv, N_HEAD),
                       (w.add_rope_dimension_count, N_EMBD // N_HEAD)):
        add(value)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(LlamaFileType.MOSTLY_Q4_0)
    w.add_tokenizer_model("llama")
    w.add_token_list(["<unk>", "<s>", "</s>"] + [f"t{i}" for i in range(N_VOCAB - 3)])
    w.add_token_scores([0.0] * N_VOCAB)
    w.add_token_types([TokenType.UNKNOWN, TokenType.CONTROL, TokenType.CONTROL] + [TokenType.NORMAL] * (N_VOCAB - 3))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)

    def f32(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * 0.05).astype(np.float32)

    def quant(kind: Q, rows: int, cols: int) -> tuple[np.ndarray, Q]:
        if kind is Q.Q4_K:
            return _q4_k(rng, rows, cols), kind
        return quants.quantize(f32(rows, cols), kind), kind

    w.add_tensor("token_embd.weight", f32(N_VOCAB, N_EMBD))
    w.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    data, kind = quant(Q.Q4_0, N_VOCAB, N_EMBD)
    w.add_tensor("output.weight", data, raw_dtype=kind)
    w.add_tensor("blk.0.attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    w.add_tensor("blk.0.ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    for name, kind, rows, cols in (("attn_q", Q.Q4_0, N_EMBD, N_EMBD), ("attn_k", Q.Q8_0, N_EMBD, N_EMBD),
                                   ("attn_v", Q.Q4_K, N_EMBD, N_EMBD), ("attn_output", Q.Q4_0, N_EMBD, N_EMBD),
                                   ("ffn_gate", Q.Q4_K, N_FF, N_EMBD), ("ffn_up", Q.Q4_0, N_FF, N_EMBD),
                                   ("ffn_down", Q.Q8_0, N_EMBD, N_FF)):
        data, raw = quant(kind, rows, cols)
        w.add_tensor(f"blk.0.{name}.weight", data, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main(argv: list[str]) -> int:
    import llama_cpp as lc

    from ..engine import native
    from ..engine.types import LoadOptions

    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("usage: python -m localrun.hardware.repack_probe DIRECTORY", file=sys.stderr)
        return 2
    path = Path(argv[0]) / "probe.gguf"
    write_model(path)
    model = native.load_model(str(path), LoadOptions(repack=True))
    ctx = native.create_context(model, native.ContextSpec(n_ctx=256, n_seq_max=1, n_batch=64, n_threads=2,
                                                          swa_full=False))
    batch = native.Batch(64)
    batch.add(0, 0, list(range(3, 35)), True)
    if batch.decode(ctx) != 0:
        print("the prompt batch did not decode", file=sys.stderr)
        return 3
    batch.clear()
    batch.add(0, 32, [7], True)
    if batch.decode(ctx) != 0:
        print("the single token did not decode", file=sys.stderr)
        return 3
    lc.llama_synchronize(ctx)
    lc.llama_free(ctx)
    lc.llama_model_free(model)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

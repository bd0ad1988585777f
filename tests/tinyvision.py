"""Generate a tiny random-weight vision model (language model + mmproj) and tiny PNGs for tests.

`write_tiny_vision` writes two GGUFs that libmtmd (llama.cpp's multimodal library) loads and runs:

- the language model: tinymodel's llama (2 layers, dimension 64) with a plain ChatML template;
- the projector ("mmproj"): a CLIP-style ViT with LLaVA's "mlp" projector, the projector type with
  the fewest tensors that libmtmd still treats as a real vision model. 32x32 images cut into 8x8
  patches: every image becomes 16 embeddings of dimension 64 (the language model's n_embd).
  No special image tokens (LLaVA puts the embeddings where the marker was), causal attention,
  ordinary 1-D positions (no M-RoPE).

Why these numbers (llama.cpp tools/mtmd/clip.cpp): the "mlp" graph runs the first
``block_count - 1`` layers (LLaVA takes the features of the second-to-last layer), so two blocks
are written and one is used; clip.cpp swaps ffn_up/ffn_down of "old" files when ffn_down's first
dimension equals the hidden size, so the feed-forward size (64) differs from the hidden size (32).
``mm.2.weight``'s output dimension is what libmtmd checks against the language model's n_embd.

`write_tiny_png` writes a valid RGB PNG (pure zlib/struct, no Pillow) from a seed.
The same arguments always give the same bytes.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGUFWriter, LlamaFileType
from tinymodel import CHATML_TEMPLATE, write_tiny_gguf

N_EMBD = 64            # the language model's n_embd = the projector's output dimension
IMAGE_SIZE = 32        # clip.vision.image_size: every image is resized to 32x32
PATCH_SIZE = 8         # clip.vision.patch_size
IMAGE_TOKENS = (IMAGE_SIZE // PATCH_SIZE) ** 2   # 16 embeddings per image
V_EMBD = 32            # vision transformer width
V_FF = 64              # vision feed-forward size (must differ from V_EMBD, see module docstring)
V_HEADS = 2
V_LAYERS = 2
MM_HIDDEN = 64         # width between mm.0 and mm.2


@dataclass(frozen=True)
class VisionShape:
    """The encoder's size: the defaults are the tiny test model; benchmarks use a ViT-S-like one
    (``BENCH_SHAPE``: 224-pixel images, 256 tokens each) so encoding costs what it does for real."""

    image_size: int = IMAGE_SIZE
    patch_size: int = PATCH_SIZE
    v_embd: int = V_EMBD
    v_ff: int = V_FF
    v_heads: int = V_HEADS
    v_layers: int = V_LAYERS

    @property
    def image_tokens(self) -> int:
        return (self.image_size // self.patch_size) ** 2


BENCH_SHAPE = VisionShape(image_size=224, patch_size=14, v_embd=384, v_ff=1536, v_heads=6, v_layers=12)


def write_tiny_vision(dir: Path, *, seed: int = 0, shape: VisionShape = VisionShape(),
                      kind: str = "llava") -> tuple[Path, Path]:
    """Write ``dir/tiny-vision.gguf`` (language model) and ``dir/tiny-vision-mmproj.gguf``.

    ``kind="qwen2vl"``: Qwen2-VL's layout instead (``<kind>-vision*.gguf``): the language model under
    the ``qwen2vl`` architecture (M-RoPE) and a ``qwen2vl_merger`` projector, whose images take
    fewer positions than embeddings (a grid of h x w embeddings advances the position by max(h, w)).
    ``"qwen25vl"``: Qwen2.5-VL's (the same language model; window attention and a gated SiLU
    feed-forward in the vision tower); ``"qwen3vl"``: Qwen3-VL's (see tinymodel.py and _write_mmproj).
    Returns (model path, mmproj path). Deterministic: the same ``seed`` gives the same bytes.
    """
    assert kind in ("llava", "qwen2vl", "qwen25vl", "qwen3vl"), kind
    dir = Path(dir)
    dir.mkdir(parents=True, exist_ok=True)
    prefix = "tiny" if kind == "llava" else kind
    model = write_tiny_gguf(dir / f"{prefix}-vision.gguf", seed=seed, n_embd=N_EMBD, chat_template=CHATML_TEMPLATE,
                            name=f"{prefix}-vision", arch={"llava": "llama", "qwen25vl": "qwen2vl"}.get(kind, kind))
    mmproj = _write_mmproj(dir / f"{prefix}-vision-mmproj.gguf", seed=seed + 1000, shape=shape, kind=kind)
    return model, mmproj


def _write_mmproj(path: Path, *, seed: int, shape: VisionShape, kind: str = "llava") -> Path:
    """The projector GGUF. ``llava``: a CLIP ViT with position embeddings and LLaVA's "mlp" projector
    (mm.0 -> GELU -> mm.2). ``qwen2vl``: Qwen2-VL's tower (tools/mtmd/models/qwen2vl.cpp): two patch
    convolutions (one per frame of a video pair; a still image goes through both), 2-D M-RoPE in the
    blocks instead of position embeddings, and the merger (2x2 neighbouring patches concatenated,
    then mm.0 -> GELU -> mm.2). Qwen2-VL resizes images to multiples of 2 patches, at least 8
    merged embeddings (libmtmd's limit)."""
    rng = np.random.default_rng(seed)
    v_embd, v_ff = shape.v_embd, shape.v_ff

    def t(shape: tuple[int, ...], scale: float = 0.2) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    w = GGUFWriter(str(path), "clip")
    w.add_name(f"{'tiny' if kind == 'llava' else kind}-vision-mmproj")
    w.add_file_type(LlamaFileType.ALL_F32)
    w.add_string("clip.projector_type", {"llava": "mlp", "qwen25vl": "qwen2.5vl_merger"}.get(kind, f"{kind}_merger"))
    w.add_bool("clip.has_vision_encoder", True)
    w.add_bool("clip.use_silu" if kind == "qwen25vl" else "clip.use_gelu", True)
    if kind == "qwen25vl":  # window attention in every layer but each second one, windows of 2 x 2 merged patches
        w.add_uint32("clip.vision.n_wa_pattern", 2)
        w.add_uint32("clip.vision.window_size", 4 * shape.patch_size)
    w.add_uint32("clip.vision.image_size", shape.image_size)
    w.add_uint32("clip.vision.patch_size", shape.patch_size)
    w.add_uint32("clip.vision.embedding_length", v_embd)
    w.add_uint32("clip.vision.feed_forward_length", v_ff)
    w.add_uint32("clip.vision.block_count", shape.v_layers)
    w.add_uint32("clip.vision.projection_dim", N_EMBD)
    w.add_uint32("clip.vision.attention.head_count", shape.v_heads)
    w.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-6)
    w.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    w.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])

    # numpy shapes are ggml's reversed: (rows, cols) = (ne1, ne0); the conv kernel is (out, in, kh, kw).
    kernel = (v_embd, 3, shape.patch_size, shape.patch_size)
    if kind == "llava":
        w.add_tensor("v.patch_embd.weight", t(kernel, 0.1))
        w.add_tensor("v.patch_embd.bias", t((v_embd,), 0.1))
        w.add_tensor("v.position_embd.weight", t((shape.image_tokens, v_embd), 0.1))
    else:
        w.add_tensor("v.patch_embd.weight", t(kernel, 0.1))
        w.add_tensor("v.patch_embd.weight.1", t(kernel, 0.1))
        if kind == "qwen3vl":  # a bias and learned positions (resized to the image's grid) besides the rotary ones
            w.add_tensor("v.patch_embd.bias", t((v_embd,), 0.1))
            w.add_tensor("v.position_embd.weight", t((shape.image_tokens, v_embd), 0.1))
    for i in range(shape.v_layers):
        p = f"v.blk.{i}."
        for norm in ("ln1", "ln2"):
            w.add_tensor(p + norm + ".weight", np.ones(v_embd, dtype=np.float32))
            w.add_tensor(p + norm + ".bias", np.zeros(v_embd, dtype=np.float32))
        # Qwen3-VL projects q, k and v at once
        qkv = [("attn_qkv", 3 * v_embd)] if kind == "qwen3vl" else [(n, v_embd) for n in ("attn_q", "attn_k", "attn_v")]
        for name, rows in [*qkv, ("attn_out", v_embd)]:
            w.add_tensor(p + name + ".weight", t((rows, v_embd)))
            w.add_tensor(p + name + ".bias", t((rows,), 0.05))
        w.add_tensor(p + "ffn_up.weight", t((v_ff, v_embd)))
        w.add_tensor(p + "ffn_up.bias", t((v_ff,), 0.05))
        if kind == "qwen25vl":  # a gated (SwiGLU) feed-forward
            w.add_tensor(p + "ffn_gate.weight", t((v_ff, v_embd)))
            w.add_tensor(p + "ffn_gate.bias", t((v_ff,), 0.05))
        w.add_tensor(p + "ffn_down.weight", t((v_embd, v_ff)))
        w.add_tensor(p + "ffn_down.bias", t((v_embd,), 0.05))
    # mm.0 (linear) -> GELU -> mm.2 (linear), large enough outputs that images move the language
    # model's logits visibly; Qwen2-VL's merger takes 4 patches' features at once.
    inputs, hidden = (v_embd, MM_HIDDEN) if kind == "llava" else (4 * v_embd, 4 * v_embd)
    w.add_tensor("mm.0.weight", t((hidden, inputs), 0.5 if kind == "llava" else 0.3))
    w.add_tensor("mm.0.bias", t((hidden,), 0.1))
    w.add_tensor("mm.2.weight", t((N_EMBD, hidden), 0.5))
    w.add_tensor("mm.2.bias", t((N_EMBD,), 0.1))
    if kind == "qwen3vl":  # deepstack: layer 0's merged features, projected for the language model's layer 0
        w.add_tensor("v.deepstack.0.norm.weight", np.ones(4 * v_embd, dtype=np.float32))
        w.add_tensor("v.deepstack.0.norm.bias", np.zeros(4 * v_embd, dtype=np.float32))
        w.add_tensor("v.deepstack.0.fc1.weight", t((4 * v_embd, 4 * v_embd), 0.3))
        w.add_tensor("v.deepstack.0.fc1.bias", t((4 * v_embd,), 0.1))
        w.add_tensor("v.deepstack.0.fc2.weight", t((N_EMBD, 4 * v_embd), 0.5))
        w.add_tensor("v.deepstack.0.fc2.bias", t((N_EMBD,), 0.1))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def tiny_png_bytes(width: int, height: int, seed: int) -> bytes:
    """A valid 8-bit RGB PNG of random pixels drawn from ``seed`` (same arguments, same bytes)."""
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8)
    raw = b"".join(b"\x00" + pixels[y].tobytes() for y in range(height))  # filter type 0 per row

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8 bits, RGB, deflate, no interlace
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")


def write_tiny_png(path: Path, width: int, height: int, seed: int) -> Path:
    """Write `tiny_png_bytes(width, height, seed)` to ``path`` and return the path."""
    path = Path(path)
    path.write_bytes(tiny_png_bytes(width, height, seed))
    return path

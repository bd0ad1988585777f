"""Generate tiny random-weight GGUF models for tests (no downloads).

`write_tiny_gguf` writes a llama-architecture model with 2 layers, dimension 64 and a small
SentencePiece-style vocabulary (control tokens, 256 byte-fallback tokens, ASCII characters and a
few hundred words). It loads in milliseconds and generates thousands of tokens a second, so
tests exercise the real llama.cpp code paths without a real model. Output text is random.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGUFValueType, GGUFWriter, LlamaFileType, TokenType

CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# ChatML that renders tools and tool calls the Qwen/Hermes way (the tiny model's default: it "supports tools").
CHATML_TOOLS_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\n{% if messages[0].role == 'system' %}{{ messages[0].content }}\n\n{% endif %}"
    "# Tools\n<tools>{% for tool in tools %}\n{{ tool | tojson }}{% endfor %}\n</tools>\n"
    "Answer with <tool_call>{\"name\": ..., \"arguments\": ...}</tool_call><|im_end|>\n{%- endif %}"
    "{%- for message in messages %}{% if not (tools and loop.first and message.role == 'system') %}"
    "<|im_start|>{{ 'user' if message.role == 'tool' else message.role }}\n{{ message.content }}"
    "{% for call in message.tool_calls or [] %}<tool_call>\n{{ call.function | tojson }}\n</tool_call>{% endfor %}"
    "<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# A reasoning model's template (Qwen3's shape): the generation prompt opens <think> unless
# enable_thinking is false, in which case it closes an empty block.
THINKING_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n"
    "{% else %}<think>\n{% endif %}{% endif %}"
)

FIM_TOKENS = ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>")
_WORDS = ["the", "of", "and", "to", "in", "is", "you", "that", "it", "he", "was", "for", "on", "are", "as", "with", "his", "they", "at", "be", "this", "have", "from", "or", "one", "had", "by", "word", "but", "not", "what", "all", "were", "we", "when", "your", "can", "said", "there", "use", "an", "each", "which", "she", "do", "how", "their", "if", "will", "up", "other", "about", "out", "many", "then", "them", "these", "so", "some", "her", "would", "make", "like", "him", "into", "time", "has", "look", "two", "more", "write", "go", "see", "number", "no", "way", "could", "people", "my", "than", "first", "water", "been", "call", "who", "oil", "its", "now", "find", "long", "down", "day", "did", "get", "come", "made", "may", "part", "hello", "world", "json", "true", "false", "null", "name", "value", "model", "local", "run", "fast", "cache", "token"]  # noqa: E501


def _vocab(extra_control: tuple[str, ...]) -> tuple[list[str], list[float], list[int]]:
    tokens: list[str] = ["<unk>", "<s>", "</s>"]
    types: list[int] = [TokenType.UNKNOWN, TokenType.CONTROL, TokenType.CONTROL]
    for tok in extra_control:
        tokens.append(tok)
        types.append(TokenType.CONTROL)
    for b in range(256):
        tokens.append(f"<0x{b:02X}>")
        types.append(TokenType.BYTE)
    # Every prefix of every word is a piece too, so the SPM merges can reach whole words.
    words = ["▁" + w for w in _WORDS] + list(_WORDS)
    prefixes = [w[:i] for w in words for i in range(2, len(w) + 1)]
    pieces = ["▁"] + [chr(c) for c in range(33, 127)] + prefixes
    seen = set(tokens)
    for p in pieces:
        if p not in seen:
            seen.add(p)
            tokens.append(p)
            types.append(TokenType.NORMAL)
    # Longer pieces score higher so the SPM tokenizer prefers whole words.
    scores = [0.0 if t != TokenType.NORMAL else float(len(tok)) for tok, t in zip(tokens, types, strict=False)]
    return tokens, scores, types


def write_tiny_gguf(
    path: str | Path,
    *,
    seed: int = 0,
    n_embd: int = 64,
    n_layer: int = 2,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_ff: int = 128,
    context_length: int = 2048,
    chat_template: str | None = CHATML_TOOLS_TEMPLATE,
    name: str = "tiny-llama",
    metadata: dict[str, tuple[Any, GGUFValueType]] | None = None,
    arch: str = "llama",
    fim: bool = False,
) -> Path:
    """Write a tiny random-weight llama GGUF to ``path`` and return the path.

    The same arguments always give the same bytes (weights come from ``seed``). ``metadata``
    overrides or adds keys (value, GGUF type) after the normal ones: hostile-file tests use it.
    ``arch="qwen2vl"``: the same tensors under Qwen2-VL's architecture, whose M-RoPE splits each
    head's rotary dimensions into time, height and width sections (image positions are 2-D);
    ``"qwen3vl"``: Qwen3-VL's (also query/key norms, and one deepstack layer: image embeddings are
    twice n_embd wide, the second half added after layer 0).
    ``fim=True``: Qwen2.5-Coder's fill-in-the-middle tokens too (prefix, suffix, middle, pad, repository
    name, file separator), found by their text as llama.cpp finds them in a real model.
    """
    path = Path(path)
    rng = np.random.default_rng(seed)
    tokens, scores, types = _vocab(("<|im_start|>", "<|im_end|>") + (FIM_TOKENS if fim else ()))
    n_vocab = len(tokens)
    head_dim = n_embd // n_head

    assert arch in ("llama", "qwen2vl", "qwen3vl"), arch
    w = GGUFWriter(str(path), arch)
    w.add_name(name)
    w.add_context_length(context_length)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(10000.0)
    if arch == "qwen3vl":
        w.add_uint32(f"{arch}.n_deepstack_layers", 1)
    if arch in ("qwen2vl", "qwen3vl"):  # time, height, width, extra: 1/4, 3/8, 3/8 of the rotary pairs (as Qwen2-VL)
        pairs = head_dim // 2
        time, height = pairs // 4, 3 * pairs // 8
        w.add_array(f"{arch}.rope.dimension_sections", [time, height, pairs - time - height, 0])
    w.add_file_type(LlamaFileType.ALL_F32)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    if chat_template is not None:
        w.add_chat_template(chat_template)
    for key, (value, vtype) in (metadata or {}).items():
        w.add_key_value(key, value, vtype)

    def t(shape: tuple[int, ...], scale: float = 0.5) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    # numpy shapes are (rows, cols) = ggml's (ne1, ne0), i.e. reversed.
    w.add_tensor("token_embd.weight", t((n_vocab, n_embd)))
    w.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    w.add_tensor("output.weight", t((n_vocab, n_embd)))
    kv_dim = head_dim * n_head_kv
    for i in range(n_layer):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        w.add_tensor(p + "attn_q.weight", t((n_embd, n_embd), 0.2))
        w.add_tensor(p + "attn_k.weight", t((kv_dim, n_embd), 0.2))
        w.add_tensor(p + "attn_v.weight", t((kv_dim, n_embd), 0.2))
        w.add_tensor(p + "attn_output.weight", t((n_embd, n_embd), 0.2))
        if arch == "qwen3vl":
            w.add_tensor(p + "attn_q_norm.weight", np.ones(head_dim, dtype=np.float32))
            w.add_tensor(p + "attn_k_norm.weight", np.ones(head_dim, dtype=np.float32))
        w.add_tensor(p + "ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        w.add_tensor(p + "ffn_gate.weight", t((n_ff, n_embd), 0.2))
        w.add_tensor(p + "ffn_up.weight", t((n_ff, n_embd), 0.2))
        w.add_tensor(p + "ffn_down.weight", t((n_embd, n_ff), 0.2))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path

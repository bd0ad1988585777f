"""The shape of a model, from its GGUF metadata, validated for type and range.

:func:`geometry_of` turns the metadata :func:`localrun.store.gguf_file.read_gguf` walked into a
:class:`ModelGeometry`, the one record the fit check (:mod:`localrun.hardware.memory`), the layer
planner (:mod:`localrun.hardware.placement`) and the routes that show model details read. Every key that sizes
something must be a whole number (never a bool, a float, ``inf`` or ``NaN``) inside the range in
``RANGES``; per-layer keys may be arrays of such numbers (the largest one counts). A missing key
takes a conservative default. Anything else is an InvalidModelFile naming the key, so a planner
never allocates in proportion to a claimed count, divides by zero or sees a negative context.

The ranges are wide enough for every published model (405B Llama has 126 layers, 16,384-wide
embeddings, 128 heads; Llama 4 Scout claims a 10M-token context) and llama.cpp's own limit of
512 layers (``LLAMA_MAX_LAYERS``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeGuard

from ..errors import InvalidModelFile
from ..jsontypes import JSONMapping
from ..modelkind import ModelKind, model_kind
from .tokenizer_facts import TokenizerFacts

MAX_LAYERS = 512  # llama.cpp's LLAMA_MAX_LAYERS
_CHAT_FINETUNES = ("instruct", "chat", "it", "sft", "dpo", "rlhf", "assistant", "thinking", "reasoning")


class ArrayLen(int):
    """Stands for a long array the reader skipped; its value is the length."""


def is_base_model(chat_template: object, finetune: object) -> bool:
    """A base (completion-only) model: no chat template, and ``general.finetune`` names no chat tuning.

    Such a model continues text; it does not answer questions or follow a system prompt.
    """
    if isinstance(chat_template, str) and chat_template.strip():
        return False
    words = str(finetune or "").casefold().replace("_", "-").split("-")
    return not any(w in _CHAT_FINETUNES for w in words)


@dataclass(frozen=True, slots=True)
class ModelGeometry:
    """What the fit check and the prompt builder need from a GGUF header (validated by :func:`geometry_of`)."""

    architecture: str
    file_size: int
    n_layer: int
    n_embd: int
    n_ff: int
    n_head: int
    n_head_kv: int
    head_dim_k: int
    head_dim_v: int
    n_vocab: int
    n_ctx_train: int
    chat_template: str | None = None
    size_label: str | None = None
    file_type: int | None = None
    kind: ModelKind = ModelKind.GENERATION  # text, embeddings or reranking (engine.types.model_kind)
    base_model: bool = False       # a text model without chat template or chat tuning: it continues text
    tokenizer: TokenizerFacts = TokenizerFacts()

    @property
    def fim(self) -> tuple[str, str, str] | None:
        """The fill-in-the-middle tokens (prefix, suffix, middle) when the vocabulary has them."""
        return self.tokenizer.fim


@dataclass(frozen=True, slots=True)
class Range:
    """Allowed values of one metadata key; ``per_layer`` keys may be arrays of such values."""

    low: int
    high: int
    per_layer: bool = False


# Keys under "<architecture>." that size a model.
RANGES: dict[str, Range] = {
    "block_count": Range(1, MAX_LAYERS),
    "context_length": Range(1, 1 << 26),
    "embedding_length": Range(1, 1 << 18),
    "feed_forward_length": Range(0, 1 << 20, per_layer=True),
    "attention.head_count": Range(0, 1 << 14, per_layer=True),  # 0: recurrent models (Mamba)
    "attention.head_count_kv": Range(0, 1 << 14, per_layer=True),
    "attention.key_length": Range(0, 1 << 16),
    "attention.value_length": Range(0, 1 << 16),
    "attention.sliding_window": Range(0, 1 << 26),
}
MAX_VOCAB = 1 << 22
MAX_ARCH_LEN = 64


def geometry_of(meta: JSONMapping, file_size: int,
                tokenizer: TokenizerFacts = TokenizerFacts()) -> ModelGeometry:
    """Validate the sizing keys of ``meta`` (a GGUF's metadata) into a ModelGeometry.

    ``tokenizer`` carries the facts read from the vocabulary (:mod:`.tokenizer_facts`).

    Raises InvalidModelFile naming the first key of the wrong type or out of range.
    """
    arch = meta.get("general.architecture", "llama")
    if not isinstance(arch, str) or not 0 < len(arch) <= MAX_ARCH_LEN:
        raise InvalidModelFile(f"general.architecture must be a short string, got {_show(arch)}")
    values = {key: _number(meta, f"{arch}.{key}", rule) for key, rule in RANGES.items()}

    def get(key: str, default: int) -> int:
        value = values[key]
        return default if value is None else value

    n_embd = get("embedding_length", 4096)
    n_head = max(1, get("attention.head_count", 32))
    head_dim = max(1, n_embd // n_head)
    template = meta.get("tokenizer.chat_template")
    label = meta.get("general.size_label")
    ftype = meta.get("general.file_type")
    kind = _kind(arch, meta)
    return ModelGeometry(
        architecture=arch,
        file_size=file_size,
        n_layer=get("block_count", 32),
        n_embd=n_embd,
        n_ff=get("feed_forward_length", 4 * n_embd),
        n_head=n_head,
        n_head_kv=max(1, get("attention.head_count_kv", n_head)),
        head_dim_k=get("attention.key_length", 0) or head_dim,
        head_dim_v=get("attention.value_length", 0) or head_dim,
        n_vocab=_vocab_size(meta),
        n_ctx_train=get("context_length", 4096),
        chat_template=template if isinstance(template, str) else None,
        size_label=label if isinstance(label, str) else None,
        file_type=ftype if isinstance(ftype, int) and not isinstance(ftype, bool) and 0 <= ftype < 1 << 16 else None,
        kind=kind,
        base_model=kind is ModelKind.GENERATION and is_base_model(template, meta.get("general.finetune")),
        tokenizer=tokenizer,
    )


def _kind(arch: str, meta: JSONMapping) -> ModelKind:
    pooling = meta.get(f"{arch}.pooling_type")
    causal = meta.get(f"{arch}.attention.causal")
    return model_kind(arch, pooling if _is_int(pooling) else (-1 if pooling is not None else None),
                      causal if isinstance(causal, bool) else None)


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(meta: JSONMapping, key: str, rule: Range) -> int | None:
    """The key's value (the largest element of a per-layer array), None when absent."""
    if key not in meta:
        return None
    value = meta[key]
    if isinstance(value, ArrayLen) or (isinstance(value, list) and not rule.per_layer):
        raise InvalidModelFile(f"{key} must be {'a whole number' if not rule.per_layer else 'one number per layer'}, "
                               "got a long array")
    items = value if isinstance(value, list) else [value]
    if not items:
        raise InvalidModelFile(f"{key} is an empty array")
    for item in items:
        if not _is_int(item):
            raise InvalidModelFile(f"{key} must be a whole number from {rule.low} to {rule.high}, got {_show(item)}")
        if not rule.low <= item <= rule.high:
            raise InvalidModelFile(f"{key} = {item} is out of range (a model has {rule.low} to {rule.high})")
    return int(max(items))


def _vocab_size(meta: JSONMapping) -> int:
    tokens = meta.get("tokenizer.ggml.tokens")
    if tokens is None:
        return 32000
    if not isinstance(tokens, (ArrayLen, list)):
        raise InvalidModelFile(f"tokenizer.ggml.tokens must be an array of strings, got {_show(tokens)}")
    n = len(tokens) if isinstance(tokens, list) else int(tokens)
    if not 0 < n <= MAX_VOCAB:
        raise InvalidModelFile(f"the vocabulary has {n} tokens (a model has 1 to {MAX_VOCAB})")
    return n


def _show(value: object) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:40]}"

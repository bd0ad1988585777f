"""Generate tiny random-weight GGUF retrieval models (embedders and rerankers) for tests and benchmarks.

The companion of tinymodel.py (same conventions: numpy + ``gguf.GGUFWriter``, f32 weights by
default, the same arguments always give the same bytes, weights come from ``seed``). Each writer
produces a file laid out the way llama.cpp's own converter (``convert_hf_to_gguf.py``) writes the
real model family, so llama-cpp-python and ``llama-server --embedding`` / ``--rerank`` run the real
encoder, pooling and classifier-head code paths. Outputs are random vectors and random scores, but
different texts give different outputs.

- ``write_tiny_bert``: a BERT embedding model (arch ``bert``, non-causal, ``bert.pooling_type`` 1 mean
  or 2 cls), shaped like bge-small-en-v1.5's file: WordPiece tokenizer (``tokenizer.ggml.model``
  ``"bert"``), [PAD] [UNK] [CLS] [SEP] [MASK] control tokens (ids 0-4), [CLS] as bos, [SEP] as
  eos and separator, add_bos and add_eos true, add_sep false, lowercasing normalizer, 2 token types.
  Tokens are stored in llama.cpp's "phantom space" form: a whole-word piece ``word`` is
  ``"\\u2581word"``, a ``##piece`` continuation is ``"piece"``, control tokens are as-is. The
  built-in vocabulary (see ``bert_vocab``) holds the letters, digits, ASCII punctuation, a few
  hundred common English words, every word again as a ``##`` continuation and common ``##``
  suffixes, so ordinary English tokenizes into real word pieces, not [UNK]
  ("the quick brown fox" is four whole-word pieces between [CLS] and [SEP]).
- ``write_tiny_bert_reranker``: the same BERT with ``bert.pooling_type`` 4 (rank) and a
  bge-reranker style classification head: ``cls.weight`` (n_embd x n_embd) + ``cls.bias``, then
  ``cls.output.weight`` (1 x n_embd) + ``cls.output.bias``. No classifier labels key, so llama.cpp's
  n_cls_out is 1: one score per (query, document), taken at the [CLS] position.
- ``write_tiny_qwen3_reranker``: a causal Qwen3 reranker the way the converter writes
  Qwen3-Reranker: arch ``qwen3`` with per-layer attn_q_norm/attn_k_norm, ``qwen3.pooling_type`` 4,
  ``qwen3.classifier.output_labels`` ["yes", "no"], ``cls.output.weight`` with 2 rows (the "yes"
  and "no" rows of the tied embedding), tied output (no ``output.weight``) and the named chat
  template "rerank" (``tokenizer.chat_template.rerank``, listed in ``tokenizer.chat_templates``)
  with ``{query}`` and ``{document}`` placeholders; llama.cpp takes the last token and soft-maxes
  the two logits, so the score is P("yes") in (0, 1).
- ``write_tiny_qwen3_embedding``: a causal Qwen3 embedder as Qwen3-Embedding is converted:
  ``qwen3.pooling_type`` 3 (last token), <|endoftext|> as eos and add_eos true (the pooled token).

The Qwen3 models use tinymodel's SentencePiece-style vocabulary (tokenizer model ``"llama"``, byte
fallback, so nothing is [UNK]) plus Qwen's <|endoftext|> <|im_start|> <|im_end|> control tokens,
<think> </think> and the words of the rerank prompt, instead of Qwen's 151k-token byte-level BPE:
llama.cpp's tokenizer does not depend on the architecture.

Benchmark preset: ``BGE_SMALL_SHAPE`` gives the BERT writers bge-small-en-v1.5's shape (n_embd 384,
12 layers, 12 heads, n_ff 1536, context 512, a 30,522-token vocabulary padded with generated unique
word pieces, f16 weights), so benchmarks measure realistic encoder compute::

    write_tiny_bert(path, **BGE_SMALL_SHAPE)            # 67.5 MB, about a second to write
    write_tiny_bert_reranker(path, **BGE_SMALL_SHAPE)

With ``ftype="f16"`` the 2-D weight matrices are f16 and, as the converter does, 1-D tensors (norms,
biases), ``position_embd`` and ``token_types`` stay f32. Token ids of the built-in vocabulary do not
depend on the padding: generated pieces come after it.
"""

from __future__ import annotations

import itertools
import string
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from gguf import GGUFValueType, GGUFWriter, LlamaFileType, PoolingType, TokenType
from tinymodel import CHATML_TEMPLATE, _vocab

FType = Literal["f32", "f16"]

BGE_SMALL_SHAPE: dict[str, Any] = {
    "n_embd": 384, "n_layer": 12, "n_head": 12, "n_ff": 1536, "context_length": 512,
    "vocab": 30522, "ftype": "f16",
}
"""bge-small-en-v1.5's shape for the BERT writers: ``write_tiny_bert(path, **BGE_SMALL_SHAPE)``."""

BERT_CONTROL = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID = range(5)

# The prompt llama.cpp's converter stores as Qwen3-Reranker's "rerank" template (conversion/qwen.py).
QWEN3_RERANK_TEMPLATE = (
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct "
    "provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n"
    "<|im_start|>user\n<Instruct>: Given a web search query, retrieve relevant passages that answer the query\n"
    "<Query>: {query}\n<Document>: {document}<|im_end|>\n"
    "<|im_start|>assistant\n<think>\n\n</think>\n\n"
)

_WORDS = [
    "the", "of", "and", "to", "in", "is", "you", "that", "it", "he", "was", "for", "on", "are", "as", "with", "his",
    "they", "at", "be", "this", "have", "from", "or", "one", "had", "by", "word", "but", "not", "what", "all", "were",
    "we", "when", "your", "can", "said", "there", "use", "an", "each", "which", "she", "do", "how", "their", "if",
    "will", "up", "other", "about", "out", "many", "then", "them", "these", "so", "some", "her", "would", "make",
    "like", "him", "into", "time", "has", "look", "two", "more", "write", "go", "see", "number", "no", "way", "could",
    "people", "my", "than", "first", "water", "been", "call", "who", "oil", "its", "now", "find", "long", "down", "day",
    "did", "get", "come", "made", "may", "part", "hello", "world", "quick", "brown", "fox", "jumps", "over", "lazy",
    "dog", "cat", "cats", "dogs", "house", "home", "car", "road", "city", "town", "country", "capital", "france",
    "paris", "london", "berlin", "tokyo", "river", "sea", "ocean", "mountain", "tree", "trees", "forest", "flower",
    "garden", "sun", "moon", "star", "sky", "rain", "snow", "wind", "weather", "cold", "hot", "warm", "food", "eat",
    "drink", "coffee", "tea", "bread", "apple", "banana", "fruit", "milk", "cheese", "dinner", "book", "books", "read",
    "reading", "story", "news", "paper", "letter", "school", "student", "teacher", "class", "learn", "study",
    "question", "answer", "answers", "questions", "search", "query", "document", "documents", "text", "page", "title",
    "data", "file", "model", "models", "code", "program", "python", "computer", "machine", "learning", "network",
    "system", "memory", "fast", "slow", "big", "small", "large", "little", "good", "bad", "new", "old", "best",
    "better", "great", "high", "low", "right", "left", "open", "close", "start", "stop", "run", "running", "walk",
    "play", "work", "working", "help", "need", "want", "know", "think", "say", "tell", "ask", "give", "take", "keep",
    "put", "set", "show", "try", "turn", "move", "live", "feel", "seem", "leave", "mean", "become", "begin", "man",
    "woman", "child", "children", "family", "friend", "friends", "mother", "father", "name", "life", "year", "years",
    "week", "month", "hour", "minute", "night", "morning", "evening", "today", "tomorrow", "yesterday", "always",
    "never", "often", "again", "still", "also", "just", "very", "much", "most", "only", "even", "back", "after",
    "before", "because", "while", "where", "why", "here", "every", "any", "same", "different", "another", "between",
    "under", "through", "during", "without", "against", "around", "above", "below", "near", "far", "away", "yes",
    "please", "thank", "thanks", "sorry", "money", "price", "market", "bank", "business", "company", "job", "office",
    "report", "meeting", "plan", "game", "music", "song", "movie", "film", "art", "red", "blue", "green", "white",
    "black", "yellow", "color", "light", "dark", "heavy", "short", "tall", "young", "happy", "sad", "love", "hate",
]

_SUFFIXES = ("s", "es", "ed", "ing", "er", "ers", "est", "ly", "tion", "tions", "ness", "ment", "able", "ful",
             "less", "al", "ic", "y", "en", "ous", "ize", "ity", "ist", "ism")


def bert_vocab(size: int | None = None, extra: Sequence[str] = ()) -> list[str]:
    """The BERT vocabulary in Hugging Face form ("[CLS]", "word", "##piece"), ids in list order.

    The built-in list is [PAD] [UNK] [CLS] [SEP] [MASK] (ids 0-4), ASCII punctuation, digits and
    letters (whole-word and ``##`` forms), the common words, each word as a ``##`` continuation and
    common ``##`` suffixes; then ``extra`` pieces not already present; then, when ``size`` is given,
    generated unique pieces (alternately whole-word and ``##``) until there are exactly ``size``.
    """
    pieces: list[str] = list(BERT_CONTROL)
    pieces += list(string.punctuation) + list(string.digits) + list(string.ascii_lowercase)
    pieces += ["##" + c for c in string.digits + string.ascii_lowercase]
    words = list(dict.fromkeys(_WORDS))
    pieces += words + ["##" + w for w in words] + ["##" + s for s in _SUFFIXES]
    pieces += list(extra)
    vocab = list(dict.fromkeys(pieces))
    if size is not None:
        if size < len(vocab):
            raise ValueError(f"vocab size {size} is below the built-in vocabulary ({len(vocab)} tokens)")
        seen = set(vocab)
        onsets = [c for c in "bcdfghjklmnprstvwz"] + ["ch", "sh", "th", "st", "tr", "pl", "gr", "br"]
        vowels = ["a", "e", "i", "o", "u", "ai", "ea", "ou"]
        syllables = [o + v for o in onsets for v in vowels]
        for n in itertools.count(1):
            for combo in itertools.product(syllables, repeat=n):
                piece = "".join(combo)
                for form in (piece, "##" + piece):
                    if len(vocab) == size:
                        return vocab
                    if form not in seen:
                        seen.add(form)
                        vocab.append(form)
    return vocab


def _phantom(piece: str) -> str:
    """A Hugging Face WordPiece token in llama.cpp's stored form (what conversion/bert.py writes)."""
    if piece in BERT_CONTROL:
        return piece
    if piece.startswith("##"):
        return piece[2:]
    return "\u2581" + piece


def _arrays(rng: np.random.Generator, ftype: FType) -> tuple[Any, Any, Any]:
    """(random matrix, ones, zeros) makers: matrices in ``ftype``, 1-D tensors always f32."""
    if ftype not in ("f32", "f16"):
        raise ValueError(f"ftype must be 'f32' or 'f16', not {ftype!r}")
    mat_dtype = np.float16 if ftype == "f16" else np.float32

    def mat(shape: tuple[int, ...], scale: float = 0.2, *, f32: bool = False) -> np.ndarray:
        data = (rng.standard_normal(shape, dtype=np.float32) * scale)
        return data.astype(np.float32 if f32 or len(shape) == 1 else mat_dtype)

    def ones(n: int) -> np.ndarray:
        return np.ones(n, dtype=np.float32)

    def zeros(n: int) -> np.ndarray:
        return np.zeros(n, dtype=np.float32)

    return mat, ones, zeros


def _finish(w: GGUFWriter) -> None:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _write_bert(
    path: str | Path, *, seed: int, pooling: PoolingType, head: bool, n_embd: int, n_layer: int, n_head: int,
    n_ff: int, context_length: int, vocab: int | Sequence[str] | None, ftype: FType, name: str,
    metadata: dict[str, tuple[Any, GGUFValueType]] | None,
) -> Path:
    path = Path(path)
    if n_embd % n_head:
        raise ValueError(f"n_embd {n_embd} is not a multiple of n_head {n_head}")
    rng = np.random.default_rng(seed)
    mat, ones, zeros = _arrays(rng, ftype)
    hf_tokens = bert_vocab(vocab) if isinstance(vocab, int) or vocab is None else bert_vocab(extra=vocab)
    tokens = [_phantom(p) for p in hf_tokens]
    types = [TokenType.CONTROL if p in BERT_CONTROL else TokenType.NORMAL for p in hf_tokens]
    n_vocab = len(tokens)

    w = GGUFWriter(str(path), "bert")
    w.add_name(name)
    w.add_context_length(context_length)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_block_count(n_layer)
    w.add_head_count(n_head)
    w.add_layer_norm_eps(1e-12)
    w.add_file_type(LlamaFileType.MOSTLY_F16 if ftype == "f16" else LlamaFileType.ALL_F32)
    w.add_causal_attention(False)
    w.add_pooling_type(pooling)
    w.add_token_type_count(2)
    w.add_tokenizer_model("bert")
    w.add_tokenizer_pre("bert-bge")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_unk_token_id(UNK_ID)
    w.add_bos_token_id(CLS_ID)
    w.add_eos_token_id(SEP_ID)
    w.add_sep_token_id(SEP_ID)
    w.add_pad_token_id(PAD_ID)
    w.add_mask_token_id(MASK_ID)
    w.add_add_bos_token(True)
    w.add_add_eos_token(True)
    w.add_add_sep_token(False)
    w.add_bool("tokenizer.ggml.normalizer.lowercase", True)
    for key, (value, vtype) in (metadata or {}).items():
        w.add_key_value(key, value, vtype)

    # numpy shapes are (rows, cols) = ggml's (ne1, ne0), i.e. reversed.
    w.add_tensor("token_embd.weight", mat((n_vocab, n_embd), 0.5))
    w.add_tensor("token_types.weight", mat((2, n_embd), 0.1, f32=True))
    w.add_tensor("position_embd.weight", mat((context_length, n_embd), 0.1, f32=True))
    w.add_tensor("token_embd_norm.weight", ones(n_embd))
    w.add_tensor("token_embd_norm.bias", zeros(n_embd))
    for i in range(n_layer):
        p = f"blk.{i}."
        for proj in ("attn_q", "attn_k", "attn_v", "attn_output"):
            w.add_tensor(p + proj + ".weight", mat((n_embd, n_embd)))
            w.add_tensor(p + proj + ".bias", mat((n_embd,), 0.02))
        w.add_tensor(p + "attn_output_norm.weight", ones(n_embd))
        w.add_tensor(p + "attn_output_norm.bias", zeros(n_embd))
        w.add_tensor(p + "ffn_up.weight", mat((n_ff, n_embd)))
        w.add_tensor(p + "ffn_up.bias", mat((n_ff,), 0.02))
        w.add_tensor(p + "ffn_down.weight", mat((n_embd, n_ff)))
        w.add_tensor(p + "ffn_down.bias", mat((n_embd,), 0.02))
        w.add_tensor(p + "layer_output_norm.weight", ones(n_embd))
        w.add_tensor(p + "layer_output_norm.bias", zeros(n_embd))
    if head:
        w.add_tensor("cls.weight", mat((n_embd, n_embd)))
        w.add_tensor("cls.bias", mat((n_embd,), 0.02))
        w.add_tensor("cls.output.weight", mat((1, n_embd), 1.0))
        w.add_tensor("cls.output.bias", zeros(1))
    _finish(w)
    return path


def write_tiny_bert(
    path: str | Path,
    *,
    seed: int = 0,
    pooling: Literal["mean", "cls"] = "mean",
    n_embd: int = 64,
    n_layer: int = 2,
    n_head: int = 4,
    n_ff: int = 128,
    context_length: int = 512,
    vocab: int | Sequence[str] | None = None,
    ftype: FType = "f32",
    name: str = "tiny-bert",
    metadata: dict[str, tuple[Any, GGUFValueType]] | None = None,
) -> Path:
    """Write a tiny random-weight BERT embedding model to ``path`` and return the path.

    llama.cpp loads it as an encoder (``bert.attention.causal`` false) that pools with ``pooling``
    ("mean": ``bert.pooling_type`` 1, "cls": 2) into one vector of ``n_embd`` floats per text.
    ``vocab``: None for the built-in vocabulary (817 tokens); an int pads it with generated
    word pieces to exactly that many tokens; a sequence of Hugging Face form pieces ("word",
    "##piece") adds them after the built-in ones. ``ftype`` "f16" stores the 2-D matrices as f16.
    The same arguments always give the same bytes (weights come from ``seed``). ``metadata``
    overrides or adds keys (value, GGUF type) after the normal ones, as in tinymodel.
    """
    pooling_type = {"mean": PoolingType.MEAN, "cls": PoolingType.CLS}.get(pooling)
    if pooling_type is None:
        raise ValueError(f"pooling must be 'mean' or 'cls', not {pooling!r}")
    return _write_bert(path, seed=seed, pooling=pooling_type, head=False, n_embd=n_embd, n_layer=n_layer,
                       n_head=n_head, n_ff=n_ff, context_length=context_length, vocab=vocab, ftype=ftype,
                       name=name, metadata=metadata)


def write_tiny_bert_reranker(
    path: str | Path,
    *,
    seed: int = 0,
    n_embd: int = 64,
    n_layer: int = 2,
    n_head: int = 4,
    n_ff: int = 128,
    context_length: int = 512,
    vocab: int | Sequence[str] | None = None,
    ftype: FType = "f32",
    name: str = "tiny-bert-reranker",
    metadata: dict[str, tuple[Any, GGUFValueType]] | None = None,
) -> Path:
    """Write a tiny random-weight BERT cross-encoder reranker (bge-reranker style) and return the path.

    ``write_tiny_bert``'s model with ``bert.pooling_type`` 4 (rank) and a classification head
    (``cls.weight``/``cls.bias``, tanh, then ``cls.output.weight``/``cls.output.bias``). There is
    no ``bert.classifier.output_labels`` key, so the model yields one float per sequence: the
    relevance score ``llama-server --rerank`` reports for "[CLS] query [SEP] document [SEP]".
    The other arguments mean what they mean for ``write_tiny_bert``; same arguments, same bytes.
    """
    return _write_bert(path, seed=seed, pooling=PoolingType.RANK, head=True, n_embd=n_embd, n_layer=n_layer,
                       n_head=n_head, n_ff=n_ff, context_length=context_length, vocab=vocab, ftype=ftype,
                       name=name, metadata=metadata)


# Words of the rerank prompt (and "yes"), added to tinymodel's SPM vocabulary as whole pieces.
_QWEN_WORDS = [
    "yes", "judge", "whether", "document", "meets", "requirements", "based", "query", "instruct", "provided", "note",
    "answer", "only", "given", "web", "search", "retrieve", "relevant", "passages", "system", "user", "assistant",
    "think",
]


def qwen3_vocab() -> tuple[list[str], list[float], list[int]]:
    """The Qwen3 models' SentencePiece-style vocabulary: (tokens, scores, token types).

    tinymodel's vocabulary (<unk> <s> </s>, then <|endoftext|> <|im_start|> <|im_end|> as control
    tokens, 256 byte-fallback tokens, ASCII, word prefixes), then <think> and </think> as
    user-defined tokens, then the prefixes of the rerank prompt's words and of tinyencoder's words.
    """
    tokens, scores, types = _vocab(("<|endoftext|>", "<|im_start|>", "<|im_end|>"))
    seen = set(tokens)
    for tok in ("<think>", "</think>"):
        tokens.append(tok)
        scores.append(0.0)
        types.append(TokenType.USER_DEFINED)
        seen.add(tok)
    words = list(dict.fromkeys(_QWEN_WORDS + _WORDS))
    for piece in [w[:i] for w in ["\u2581" + w for w in words] + words for i in range(2, len(w) + 1)]:
        if piece not in seen:
            seen.add(piece)
            tokens.append(piece)
            scores.append(float(len(piece)))
            types.append(TokenType.NORMAL)
    return tokens, scores, types


def _write_qwen3(
    path: str | Path, *, seed: int, rerank: bool, n_embd: int, n_layer: int, n_head: int, n_head_kv: int,
    n_ff: int, context_length: int, ftype: FType, name: str, metadata: dict[str, tuple[Any, GGUFValueType]] | None,
) -> Path:
    path = Path(path)
    if n_embd % n_head or n_head % n_head_kv:
        raise ValueError(f"n_embd {n_embd}, n_head {n_head} and n_head_kv {n_head_kv} do not divide")
    rng = np.random.default_rng(seed)
    mat, ones, _ = _arrays(rng, ftype)
    tokens, scores, types = qwen3_vocab()
    ids = {tok: i for i, tok in enumerate(tokens)}
    n_vocab = len(tokens)
    head_dim = n_embd // n_head

    w = GGUFWriter(str(path), "qwen3")
    w.add_name(name)
    w.add_context_length(context_length)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_block_count(n_layer)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_freq_base(1_000_000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(LlamaFileType.MOSTLY_F16 if ftype == "f16" else LlamaFileType.ALL_F32)
    w.add_pooling_type(PoolingType.RANK if rerank else PoolingType.LAST)
    if rerank:
        w.add_classifier_output_labels(["yes", "no"])
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(ids["<unk>"])
    w.add_bos_token_id(ids["<|endoftext|>"])
    w.add_pad_token_id(ids["<|endoftext|>"])
    # Qwen3-Embedding's tokenizer appends <|endoftext|>: the token whose state is pooled.
    w.add_eos_token_id(ids["<|im_end|>"] if rerank else ids["<|endoftext|>"])
    w.add_add_bos_token(False)
    w.add_add_eos_token(not rerank)
    if rerank:
        w.add_chat_template([{"name": "default", "template": CHATML_TEMPLATE},
                             {"name": "rerank", "template": QWEN3_RERANK_TEMPLATE}])
    else:
        w.add_chat_template(CHATML_TEMPLATE)
    for key, (value, vtype) in (metadata or {}).items():
        w.add_key_value(key, value, vtype)

    # Tied embeddings, as in Qwen3-Reranker/Embedding-0.6B: no output.weight, llama.cpp reuses token_embd.
    embd = mat((n_vocab, n_embd), 0.2)
    if rerank:  # the converter's cls.output: the lm_head rows of "yes" then "no"
        w.add_tensor("cls.output.weight", np.stack([embd[ids["yes"]], embd[ids["no"]]]))
    w.add_tensor("token_embd.weight", embd)
    w.add_tensor("output_norm.weight", ones(n_embd))
    kv_dim = head_dim * n_head_kv
    for i in range(n_layer):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", ones(n_embd))
        w.add_tensor(p + "attn_q.weight", mat((n_embd, n_embd)))
        w.add_tensor(p + "attn_k.weight", mat((kv_dim, n_embd)))
        w.add_tensor(p + "attn_v.weight", mat((kv_dim, n_embd)))
        w.add_tensor(p + "attn_output.weight", mat((n_embd, n_embd)))
        w.add_tensor(p + "attn_q_norm.weight", ones(head_dim))
        w.add_tensor(p + "attn_k_norm.weight", ones(head_dim))
        w.add_tensor(p + "ffn_norm.weight", ones(n_embd))
        w.add_tensor(p + "ffn_gate.weight", mat((n_ff, n_embd)))
        w.add_tensor(p + "ffn_up.weight", mat((n_ff, n_embd)))
        w.add_tensor(p + "ffn_down.weight", mat((n_embd, n_ff)))
    _finish(w)
    return path


def write_tiny_qwen3_reranker(
    path: str | Path,
    *,
    seed: int = 0,
    n_embd: int = 64,
    n_layer: int = 2,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_ff: int = 128,
    context_length: int = 2048,
    ftype: FType = "f32",
    name: str = "tiny-qwen3-reranker",
    metadata: dict[str, tuple[Any, GGUFValueType]] | None = None,
) -> Path:
    """Write a tiny random-weight Qwen3-Reranker-style causal reranker to ``path`` and return the path.

    ``qwen3.pooling_type`` 4 (rank), ``qwen3.classifier.output_labels`` ["yes", "no"],
    ``cls.output.weight`` of 2 rows and the "rerank" chat template (``QWEN3_RERANK_TEMPLATE``,
    stored as ``tokenizer.chat_template.rerank``) that ``llama-server --rerank`` fills with the
    query and each document; ChatML is the default chat template. Same arguments, same bytes.
    """
    return _write_qwen3(path, seed=seed, rerank=True, n_embd=n_embd, n_layer=n_layer, n_head=n_head,
                        n_head_kv=n_head_kv, n_ff=n_ff, context_length=context_length, ftype=ftype, name=name,
                        metadata=metadata)


def write_tiny_qwen3_embedding(
    path: str | Path,
    *,
    seed: int = 0,
    n_embd: int = 64,
    n_layer: int = 2,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_ff: int = 128,
    context_length: int = 2048,
    ftype: FType = "f32",
    name: str = "tiny-qwen3-embedding",
    metadata: dict[str, tuple[Any, GGUFValueType]] | None = None,
) -> Path:
    """Write a tiny random-weight Qwen3-Embedding-style causal embedder to ``path`` and return the path.

    ``qwen3.pooling_type`` 3 (last token); tokenizing appends <|endoftext|> (add_eos true), whose
    hidden state is the embedding of ``n_embd`` floats. Same arguments, same bytes.
    """
    return _write_qwen3(path, seed=seed, rerank=False, n_embd=n_embd, n_layer=n_layer, n_head=n_head,
                        n_head_kv=n_head_kv, n_ff=n_ff, context_length=context_length, ftype=ftype, name=name,
                        metadata=metadata)

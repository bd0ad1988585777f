"""Fill-in-the-middle prompts as llama.cpp's server builds them for ``/infill``, token for token.

With the model's FIM tokens (PRE, SUF, MID; REP and SEP where the vocabulary has them, as
Qwen2.5-Coder's does), an :class:`~.types.Infill` becomes::

    [REP]myproject\\n [SEP]name\\n text ... [SEP]filename\\n [BOS] [PRE] prefix middle [SUF] suffix [MID]

the repository-level pattern of Qwen2.5-Coder's report (without REP/SEP, each extra chunk follows a
``--- snippet ---`` line instead). The prefix, suffix and extra texts are tokenized as plain text
(special-token text in code stays text); ``middle`` (what the user typed in the gap), as
llama-server does, parses special tokens.

What does not fit is cut as llama-server cuts it: the prefix keeps its last ``3/4`` of a batch, the
suffix its first ``1/4`` (less the middle), and the extra chunks keep their end, within what the
context leaves after a batch and twice the reply's budget. Unlike llama-server, the number of
tokens cut is returned, so the reply can say so.
"""

from __future__ import annotations

import llama_cpp as lc

from ..errors import UnsupportedCapability
from .native import Vocab
from .types import Infill

_SNIPPET = "\n\n--- snippet ---\n\n"  # llama-server's chunk separator for vocabularies without SEP
_REPO = "myproject\n"  # the repository name llama-server writes after REP
_CURRENT_FILE = "filename\n"  # ... and the name it gives the file being edited


def infill_tokens(vocab: Vocab, infill: Infill, *, n_ctx: int, n_batch: int,
                  n_predict: int | None) -> tuple[list[int], int]:
    """The prompt of ``infill`` and how many of its tokens were cut to fit (module docstring).

    UnsupportedCapability (a 400) when the vocabulary has no prefix, suffix or middle token.
    """
    v = vocab.ptr
    pre, suf, mid = lc.llama_vocab_fim_pre(v), lc.llama_vocab_fim_suf(v), lc.llama_vocab_fim_mid(v)
    rep, sep = lc.llama_vocab_fim_rep(v), lc.llama_vocab_fim_sep(v)
    if min(pre, suf, mid) < 0:
        raise UnsupportedCapability("this model does not support insert: its vocabulary has no "
                                    "fill-in-the-middle tokens")

    def text(s: str) -> list[int]:
        return vocab.tokenize(s, add_special=False, parse_special=False)

    extra: list[int] = [rep, *text(_REPO)] if rep >= 0 else []
    for filename, chunk in infill.extra:
        extra += [sep, *text(filename + "\n")] if sep >= 0 else text(_SNIPPET)
        extra += text(chunk)
    if sep >= 0:
        extra += [sep, *text(_CURRENT_FILE)]
    prefix, suffix = text(infill.prefix), text(infill.suffix)
    middle = vocab.tokenize(infill.middle, add_special=False, parse_special=True)

    n_prefix = min(len(prefix), 3 * (n_batch // 4))
    n_suffix = min(len(suffix), max(0, n_batch // 4 - (2 + len(middle))))
    n_extra = min(len(extra), max(0, n_ctx - n_batch - 2 * max(n_predict or 0, 2)))
    head = [vocab.bos] if vocab.add_bos else []
    tokens = (extra[len(extra) - n_extra:] + head + [pre] + prefix[len(prefix) - n_prefix:] + middle
              + [suf] + suffix[:n_suffix] + [mid])
    return tokens, (len(prefix) - n_prefix) + (len(suffix) - n_suffix) + (len(extra) - n_extra)

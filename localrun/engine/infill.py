"""Fill-in-the-middle prompts as llama.cpp's server builds them for ``/infill``.

With the model's FIM tokens (PRE, SUF, MID; REP and SEP where the vocabulary has them, as
Qwen2.5-Coder's does), an :class:`~.types.Infill` becomes::

    [REP]myproject\\n [SEP]name\\n text ... [SEP]filename\\n [BOS] [PRE] prefix middle [SUF] suffix [MID]

the repository-level pattern of Qwen2.5-Coder's report (without REP/SEP, each extra chunk follows a
``--- snippet ---`` line instead). The prefix, suffix and extra texts are tokenized as plain text
(special-token text in code stays text); ``middle`` (what the user typed in the gap), as
llama-server does, parses special tokens.

What does not fit is cut as llama-server cuts it: the prefix keeps its last ``3/4`` of a batch (at
a line start that stays put as the cursor moves, so the prefix cache can serve the next keystroke:
:func:`_prefix_tokens`; a prefix that fits is never cut, and then the prompt is llama-server's token
for token), the suffix its first ``1/4`` (less the middle), and the extra chunks keep their end,
within what the context leaves after a batch and twice the reply's budget. The batch is
:data:`BATCH`, the one llama.vim's and llama.vscode's presets start llama-server with (with its own
default of 2,048, twice the code would be read before each suggestion). Unlike llama-server, the
number of tokens cut is returned, so the reply can say so.
"""

from __future__ import annotations

import zlib

import llama_cpp as lc

from ..errors import UnsupportedCapability
from .native import Vocab
from .types import Infill

_SNIPPET = "\n\n--- snippet ---\n\n"  # llama-server's chunk separator for vocabularies without SEP
_REPO = "myproject\n"  # the repository name llama-server writes after REP
_CURRENT_FILE = "filename\n"  # ... and the name it gives the file being edited
BATCH = 1024  # llama-server's -b in llama.vim's and llama.vscode's presets (--fim-qwen-1.5b-default and the like)


def infill_tokens(vocab: Vocab, infill: Infill, *, n_ctx: int, n_predict: int | None,
                  n_batch: int = BATCH) -> tuple[list[int], int]:
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
    prefix, prefix_cut = _prefix_tokens(vocab, infill.prefix, 3 * (n_batch // 4))
    suffix = text(infill.suffix)
    middle = vocab.tokenize(infill.middle, add_special=False, parse_special=True)

    n_suffix = min(len(suffix), max(0, n_batch // 4 - (2 + len(middle))))
    n_extra = min(len(extra), max(0, n_ctx - n_batch - 2 * max(n_predict or 0, 2)))
    head = [vocab.bos] if vocab.add_bos else []
    tokens = extra[len(extra) - n_extra:] + head + [pre] + prefix + middle + [suf] + suffix[:n_suffix] + [mid]
    return tokens, prefix_cut + (len(suffix) - n_suffix) + (len(extra) - n_extra)


def _prefix_tokens(vocab: Vocab, prefix: str, budget: int) -> tuple[list[int], int]:
    """The prefix's last tokens within ``budget``, and how many were cut.

    llama-server keeps exactly the last ``budget`` tokens, so its first kept token moves with every
    keystroke and only its ``--cache-reuse`` (cells shifted to new positions) saves re-reading the
    rest. localrun's prefix cache matches exact prefixes, so the cut is made where it stays put:
    at the start of the line whose text hashes lowest among those starting in the first half of what
    llama-server would keep (winnowing). As the cursor moves down, that line stays the first one
    kept until it leaves the window or a line hashing lower enters it, so the prefix read for one
    suggestion is the start of the next one's most of the time. Between half of ``budget`` and
    ``budget`` tokens are kept, three quarters on average. They are the whole prefix's own tokens
    from that line on (not the line's text tokenized again), so they are also what an earlier,
    shorter prefix read there: shifted reuse (GenerateRequest.cache_reuse) finds them when the cut
    line moves on.
    """
    tokens = vocab.tokenize(prefix, add_special=False, parse_special=False)
    over = len(tokens) - budget
    if over <= 0:
        return tokens, 0
    data = prefix.encode("utf-8", "replace")
    at = sum(len(vocab.piece(t)) for t in tokens[:over])  # llama-server's cut, in bytes
    limit = at + (len(data) - at) // 2
    best: tuple[int, int] | None = None  # (hash, start) of the line picked so far
    pos = data.find(b"\n", max(0, at - 1)) + 1
    while 0 < pos <= limit:
        end = data.find(b"\n", pos)
        line_hash = zlib.crc32(data[pos:end if end >= 0 else len(data)])
        if best is None or line_hash < best[0]:
            best = line_hash, pos
        if end < 0:
            break
        pos = end + 1
    if best is None:  # no line starts there: llama-server's own cut
        return tokens[over:], over
    offset, first = 0, len(tokens)  # the first token that starts at or after the line picked
    for i, t in enumerate(tokens):
        if offset >= best[1]:
            first = i
            break
        offset += len(vocab.piece(t))
    first = max(first, over)
    return tokens[first:], first

"""Tokenizing a prompt that begins like a recent one: only what follows the shared part is tokenized.

A coding agent sends its whole conversation again at every turn (Claude Code: ~19k tokens before the
user's words), and a prompt that may not fit is tokenized twice (the daemon asks for its system
prefix's length first). llama.cpp's tokenizer takes ~2.8 us a token on a 2-vCPU EPYC (69 ms for
24k tokens of Qwen's vocabulary): noise beside a CPU's prefill, a large part of a turn's first token
where a GPU reads the few new tokens in tens of milliseconds.

**Why a cut before a special token is exact.** With ``parse_special`` llama.cpp first finds every
special token in the text (control and user-defined tokens: ``<|im_start|>``, ``<tool_call>``...) and
then tokenizes the plain text between two of them on its own. So when a new text has the same bytes
as a remembered one up to the end of such a token, every token before that token is the same in
both, and the new text's tokens are the remembered ones up to the cut plus the tokenization of the
rest (which begins with the special token; no BOS of its own). Chat templates put a special token at
every message boundary, so a conversation's next turn reuses all but its last message.

Three things would break that, and each disables a cut instead of being assumed away:

- a special token whose text occurs inside another special token's text (the longer one could then
  match across the cut in one text and not the other): such tokens are never cut at;
- a token that strips the whitespace beside it (LSTRIP/RSTRIP): never cut at;
- a vocabulary whose tokens do not spell the text back byte for byte (SentencePiece's space prefix,
  normalisation): an entry is remembered only when its tokens' bytes, special tokens included, equal
  its text, which is also how a cut's byte offset is known; a vocabulary whose first texts all fail
  that is not tried again. A vocabulary that appends EOS when it tokenizes (``add_eos``) is never
  cached.

Remembering a text walks its new tokens and, the first time, lists the vocabulary's special tokens
(every id is asked: 0.14-0.19 s for Qwen's 152k vocabulary, once per load). None of that decides the
tokens the caller gets, so with ``background=True`` (the engine's) it runs on a thread of its own
while the prompt is read: an agent's first request waited 166-243 ms for it where tokenizing its 14k
tokens took 26-47 ms. A text whose remembering has not finished is simply not found yet; at most
:data:`PENDING` texts wait to be remembered, later ones are not. Turn after turn of a 15k-token agent
conversation on that vocabulary: 39-50 ms tokenized whole, 1.5-3 ms so
(tests/integration/engine/test_prompt_tokens.py checks the tokens against the whole text's on random
edits).

Thread-safe: the runner's reader thread (prompts) and its RPC threads (``/api/tokenize``, a system
prefix's length) both tokenize. :meth:`PromptTokenizer.close` before the vocabulary is freed.
"""

from __future__ import annotations

import bisect
import logging
import queue
import threading
from array import array
from collections import OrderedDict
from dataclasses import dataclass

from .native import SpecialToken, Vocab

log = logging.getLogger(__name__)

MIN_BYTES = 4096      # shorter texts are tokenized whole and not remembered (~1k tokens, ~3 ms)
MIN_REUSE = 256       # tokens a cut must keep to be used at all
ENTRIES = 8           # texts remembered, most recently used last
MAX_TOKENS = 1 << 20  # ... and tokens in all of them (4 bytes each, beside their text)
MAX_ENTRY_BYTES = 4 << 20  # a longer text is tokenized whole and not remembered
GIVE_UP = 2           # long texts a vocabulary fails to spell back, none spelled yet, before it is not tried again
PENDING = 4           # texts waiting to be remembered in the background (each holds its bytes and tokens)
_CHUNK = 4096         # bytes compared at a time when looking for where two texts part


@dataclass(frozen=True, slots=True)
class _Entry:
    """A remembered text and its tokens; ``cut_offsets[k]`` is the byte offset where the special token
    ``tokens[cut_indices[k]]`` begins, and ``cut_ends[k]`` where it ends (ascending)."""

    data: bytes
    add_special: bool
    tokens: array[int]  # 'i'
    cut_offsets: tuple[int, ...]
    cut_indices: tuple[int, ...]
    cut_ends: tuple[int, ...]


def common_prefix(a: bytes, b: bytes) -> int:
    """How many leading bytes ``a`` and ``b`` share."""
    n = min(len(a), len(b))
    lo = 0
    while lo < n and a[lo:lo + _CHUNK] == b[lo:lo + _CHUNK]:
        lo += _CHUNK
    if lo >= n:
        return n
    hi = min(lo + _CHUNK, n)  # they part in [lo, hi): the first differing byte
    while lo < hi:
        mid = (lo + hi) // 2
        if a[lo:mid + 1] == b[lo:mid + 1]:
            lo = mid + 1
        else:
            hi = mid
    return lo


class PromptTokenizer:
    """``tokenize`` that reuses the tokens of the recent text sharing the longest prefix (module docstring)."""

    def __init__(self, vocab: Vocab, *, background: bool = False) -> None:
        """``background``: remember texts on a thread of this tokenizer's own (module docstring)."""
        self.vocab = vocab
        self._background = background
        self._jobs: queue.SimpleQueue[tuple[bytes, bool, list[int], tuple[_Entry, int] | None] | None] = \
            queue.SimpleQueue()
        self._worker: threading.Thread | None = None  # started by the first text remembered in the background
        self._closed = False
        self._pending = 0  # jobs queued or running (under _idle's lock)
        self._idle = threading.Condition()
        self._entries: OrderedDict[int, _Entry] = OrderedDict()  # id(entry) -> entry, least recent first
        self._lock = threading.Lock()
        self._tokens = 0  # tokens in _entries
        self._safe: dict[int, bool] = {}       # token -> may a text be cut before it (_cuttable)
        self._joined: bytes | None = None
        self.enabled = not vocab.add_eos and not vocab.add_sep
        self._spelled = False  # a text's tokens have spelled it back (the vocabulary can be cached)
        self._misspelled = 0   # texts whose tokens did not
        self.reused_tokens = 0  # tokens taken from remembered texts so far (tests, stats)

    def tokenize(self, text: str, *, add_special: bool = True) -> list[int]:
        """``vocab.tokenize(text, add_special=add_special)``, the same tokens, cheaper when a recent
        text began the same way."""
        data = text.encode("utf-8", "replace")
        if not self.enabled or not MIN_BYTES <= len(data) <= MAX_ENTRY_BYTES:
            return self.vocab.tokenize(text, add_special=add_special)
        found = self._best_cut(data, add_special)
        if found is None:
            tokens = self.vocab.tokenize(text, add_special=add_special)
        else:
            entry, k = found
            offset, index = entry.cut_offsets[k], entry.cut_indices[k]
            rest = self.vocab.tokenize(data[offset:].decode("utf-8", "replace"), add_special=False)
            tokens = entry.tokens[:index].tolist()
            tokens += rest
            self.reused_tokens += index
        if not self._background:
            self._remember(data, add_special, tokens, found)
            return tokens
        with self._idle:
            if self._pending >= PENDING or self._closed:
                return tokens
            self._pending += 1
            if self._worker is None:
                self._worker = threading.Thread(target=self._work, name="tokencache", daemon=True)
                self._worker.start()
        self._jobs.put((data, add_special, tokens.copy(), found))  # the caller may change its list
        return tokens

    def settle(self) -> None:
        """Return once every text handed to the background so far is remembered (or refused)."""
        with self._idle:
            self._idle.wait_for(lambda: self._pending == 0)

    def close(self) -> None:
        """Finish what is pending and stop the background thread; later texts are not remembered.
        Idempotent; call it before the vocabulary's model is freed."""
        with self._idle:
            self._closed = True
            worker, self._worker = self._worker, None
        if worker is not None:
            self._jobs.put(None)
            worker.join()

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                self._remember(*job)
            except Exception:  # a bug here costs the cache a text, never the thread (and so settle())
                log.exception("tokencache: remembering a text failed")
            finally:
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()

    def _cuttable(self, token: int, special: SpecialToken) -> bool:
        """Whether a text may be cut before ``token``: it strips no whitespace, and its text occurs in
        no other special token's text (asked once per token; most texts hold a handful of kinds)."""
        known = self._safe.get(token)
        if known is None:
            if self._joined is None:  # every special token's text, NUL-separated (none contains NUL)
                self._joined = b"\0".join(s.text for s in self.vocab.special_tokens().values())
            known = self._safe[token] = bool(special.text) and not special.strips \
                and b"\0" not in special.text \
                and self._joined.count(special.text) == (token in self.vocab.special_tokens())
        return known

    def _best_cut(self, data: bytes, add_special: bool) -> tuple[_Entry, int] | None:
        """The remembered entry and cut keeping the most tokens for ``data``, if one keeps MIN_REUSE."""
        with self._lock:
            entries = [e for e in self._entries.values() if e.add_special == add_special]
        best: tuple[_Entry, int] | None = None
        best_index = MIN_REUSE - 1
        for entry in entries:
            shared = common_prefix(entry.data, data)
            # the last cut whose special token lies wholly inside the shared bytes
            k = bisect.bisect_right(entry.cut_ends, shared) - 1
            if k >= 0 and entry.cut_indices[k] > best_index:
                best, best_index = (entry, k), entry.cut_indices[k]
        if best is not None:
            with self._lock:
                if id(best[0]) in self._entries:
                    self._entries.move_to_end(id(best[0]))
        return best

    def _remember(self, data: bytes, add_special: bool, tokens: list[int], reused: tuple[_Entry, int] | None) -> None:
        """Keep ``data`` if its tokens spell it back; the cuts before the reused one are the old entry's."""
        if reused is None:
            offsets: list[int] = []
            indices: list[int] = []
            ends: list[int] = []
            start = 1 if add_special and self.vocab.add_bos and tokens[:1] == [self.vocab.bos] else 0
            pos = 0
        else:
            old, k = reused
            offsets, indices, ends = list(old.cut_offsets[:k]), list(old.cut_indices[:k]), list(old.cut_ends[:k])
            start, pos = old.cut_indices[k], old.cut_offsets[k]
        base = pos
        specials = self.vocab.special_tokens()
        piece = self.vocab.piece
        pieces: list[bytes] = []
        for i in range(start, len(tokens)):
            token = tokens[i]
            special = specials.get(token)
            if special is None:
                text = piece(token)
            else:
                text = special.text
                if self._cuttable(token, special):
                    offsets.append(pos)
                    indices.append(i)
                    ends.append(pos + len(text))
            pieces.append(text)
            pos += len(text)
        if pos != len(data) or b"".join(pieces) != data[base:]:
            # the tokens do not spell the text: no cut offset can be trusted. A vocabulary that never
            # does (SentencePiece's space prefix) stops paying for the check (~5 ms a 15k-token text)
            self._misspelled += 1
            if not self._spelled and self._misspelled >= GIVE_UP:
                self.enabled = False
            return
        self._spelled = True
        entry = _Entry(data, add_special, array("i", tokens), tuple(offsets), tuple(indices), tuple(ends))
        with self._lock:
            self._entries[id(entry)] = entry
            self._tokens += len(tokens)
            while len(self._entries) > ENTRIES or self._tokens > MAX_TOKENS:
                self._tokens -= len(self._entries.popitem(last=False)[1].tokens)

"""Incremental detokenisation with stop strings.

Tokens arrive one at a time as raw bytes (a character may span several tokens; control tokens
print as nothing). :class:`TextStream` turns them into text that is always whole UTF-8
characters, and never emits a stop string: text that could be the start of a stop string is
held back until the next token decides it. Invalid bytes become U+FFFD rather than an error.
"""

from __future__ import annotations

import codecs


class TextStream:
    """Bytes in, safe text out; ``stopped`` once a stop string appeared (it and what follows are dropped).

    ``matched`` is then the stop string that ended the text (the first one in the text), else None.
    """

    def __init__(self, stop: tuple[str, ...] | list[str] = ()) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stops = [s for s in stop if s]
        self._held = ""
        self.stopped = False
        self.matched: str | None = None

    def push(self, piece: bytes) -> str:
        """Add one token's bytes; returns the text that is now safe to show."""
        if self.stopped:
            return ""
        text = self._held + self._decoder.decode(piece)
        if not self._stops:
            self._held = ""
            return text
        found = [(i, s) for s in self._stops if (i := text.find(s)) >= 0]
        if found:
            cut, self.matched = min(found, key=lambda pair: pair[0])
            self.stopped = True
            self._held = ""
            return text[:cut]
        hold = self._partial_stop_len(text)
        self._held = text[len(text) - hold:] if hold else ""
        return text[: len(text) - hold]

    def flush(self) -> str:
        """The held-back text at the end of generation (no stop string can complete any more)."""
        if self.stopped:
            return ""
        text = self._held + self._decoder.decode(b"", final=True)
        self._held = ""
        return text

    def _partial_stop_len(self, text: str) -> int:
        """Length of the longest suffix of ``text`` that is a proper prefix of a stop string.

        Only positions holding a stop string's first character are tried, each with one
        ``startswith``: linear in the held text, not quadratic.
        """
        best = 0
        for stop in self._stops:
            start = max(0, len(text) - len(stop) + 1, 0)
            i = text.find(stop[0], start)
            while i >= 0 and len(text) - i > best:
                if stop.startswith(text[i:]):
                    best = len(text) - i
                    break
                i = text.find(stop[0], i + 1)
        return best

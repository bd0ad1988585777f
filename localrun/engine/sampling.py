"""Per-sequence native sampling: option invariants, llama_sampler chains, grammar, logprobs.

Each sequence owns one chain (greedy without a grammar skips the chain: greedy.py) (penalty history
and RNG are per stream, so sampling adds no dependence on what runs alongside; whether the logits
do is explained in native.py) and, when output is constrained, one grammar sampler kept outside
the chain. Chain order is llama.cpp's: penalties, top_k, typical_p, top_p, min_p, temperature,
then dist (or greedy when temperature is 0); a request naming its ``samplers`` (llama-server's
field) gets exactly those, in its order, then dist.

Speed: penalties over a 262k vocabulary cost more than the rest of the chain. When they can only
lower logits (repeat_penalty >= 1, presence/frequency >= 0) and a top_k applies, the chain first
keeps the top ``k + repeat_last_n`` tokens, which provably contains the top k after penalising
at most ``repeat_last_n`` distinct tokens, so the result is the same as penalising everything.

Grammar: the chain samples first and the grammar only checks that one token; only when it is
rejected is the grammar applied to the whole vocabulary and the chain run again (llama.cpp's
common sampler does the same). A token is accepted by the grammar only after it passed the
grammar, because a rejected accept throws inside llama.cpp.

End of generation: with ``ignore_eos`` (or while fewer than ``min_tokens`` tokens were generated)
the logits of every end-of-generation token are set to -inf in the output row before sampling, as
llama.cpp's server does with a -inf logit bias: the sampled token is always a real one, and
penalties, top-k and logprobs see the masked row. The row is masked in place rather than with a
logit-bias sampler in the chain because ``min_tokens`` switches the mask off mid-stream, and a
chain cannot drop a sampler without losing its penalty history and RNG state. A grammar turns
both off: constrained output ends when the grammar is complete, else it could only dead-end.
"""

from __future__ import annotations

import codecs
import ctypes
import dataclasses
import math
import secrets
from dataclasses import dataclass

import llama_cpp as lc
import numpy as np

from ..errors import GrammarError
from . import limits
from .backend_sampler import sampled_token
from .greedy import GreedyPenalties
from .native import Vocab
from .types import SamplingOptions, TokenLogprob

_TOKEN_DATA = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])


def assert_valid(options: SamplingOptions) -> None:
    """Assert the invariants the server established: every option of :mod:`.limits` that
    SamplingOptions holds is :func:`~.limits.within` its range (checked once per request, with a
    400 naming the option, in :mod:`localrun.server.options`).

    A value outside them here is a bug in the caller, not bad user input, so it fails an assertion
    (the runner reports it as an EngineError) instead of being validated a second time. None is
    ``seed``'s "random" and ``num_predict``'s "no limit".
    """
    for field in dataclasses.fields(options):
        value = getattr(options, field.name)
        if field.name in ("seed", "num_predict", "samplers") and value is None:
            continue
        assert limits.within(field.name, value), f"{field.name}={value!r} is not {limits.describe(field.name)}"
    # The server sends None for any negative num_predict; a direct caller may use Ollama's -1 / -2.
    assert options.num_predict is None or options.num_predict >= -2, f"num_predict={options.num_predict!r}"


def resolve_seed(seed: int | None) -> int:
    """A 32-bit seed for llama_sampler_init_dist (None: random; 0xFFFFFFFF means random there)."""
    if seed is None:
        return secrets.randbelow(0xFFFFFFFF)
    value = seed & 0xFFFFFFFF
    return value if value != 0xFFFFFFFF else 0xFFFFFFFE


class TokenData:
    """A reusable llama_token_data_array over the whole vocabulary (one per engine thread)."""

    def __init__(self, n_vocab: int) -> None:
        self.n_vocab = n_vocab
        self.data = np.zeros(n_vocab, dtype=_TOKEN_DATA)
        self.data["id"] = np.arange(n_vocab, dtype=np.int32)
        self.array = lc.llama_token_data_array()
        # llama_cpp annotates the data field as an Array; the C struct holds a pointer
        self.array.data = self.data.ctypes.data_as(lc.llama_token_data_p)  # type: ignore[assignment]
        self.one = np.zeros(1, dtype=_TOKEN_DATA)
        self.one_array = lc.llama_token_data_array()
        self.one_array.data = self.one.ctypes.data_as(lc.llama_token_data_p)  # type: ignore[assignment]
        self.ref = ctypes.byref(self.array)
        self.one_ref = ctypes.byref(self.one_array)

    def fill(self, logits: np.ndarray) -> None:
        self.data["id"] = np.arange(self.n_vocab, dtype=np.int32)  # samplers reorder in place
        self.data["logit"] = logits
        self.data["p"] = 0.0
        self.array.size = self.n_vocab
        self.array.selected = -1
        self.array.sorted = False


@dataclass(slots=True)
class Sampler:
    """The native samplers of one sequence; free() must be called exactly once."""

    chain: int
    grammar: int | None
    greedy: bool
    logprobs: bool
    top_logprobs: int
    utf8_tail: bytes = b""   # grammar mode: the output's incomplete last character
    eog: np.ndarray | None = None  # EOG token ids to mask, None when EOG always ends the output
    ignore_eos: bool = False       # mask them for the whole output
    min_tokens: int = 0            # mask them while fewer tokens than this were generated
    fast_greedy: GreedyPenalties | None = None  # greedy without a grammar: no chain (greedy.py)
    backend: int = 0  # the chain llama.cpp samples this sequence with in its graph (backend_sampler.py)

    def suppresses_eog(self, generated: int) -> bool:
        """Whether EOG tokens are masked for the token after ``generated`` generated ones."""
        return self.eog is not None and (self.ignore_eos or generated < self.min_tokens)

    def free(self) -> None:
        if self.chain:
            lc.llama_sampler_free(self.chain)
            self.chain = 0
        if self.grammar:
            lc.llama_sampler_free(self.grammar)
            self.grammar = None


def build_sampler(options: SamplingOptions, vocab: Vocab, gbnf: str | None, num_ctx: int) -> Sampler:
    """Create the chain for ``options`` (already validated); GrammarError when GBNF is invalid."""
    grammar = None
    if gbnf is not None:
        grammar = lc.llama_sampler_init_grammar(vocab.ptr, gbnf.encode(), b"root")
        if not grammar:
            raise GrammarError("the grammar could not be parsed (invalid GBNF)")
    params = lc.llama_sampler_chain_default_params()
    params.no_perf = True
    chain = lc.llama_sampler_chain_init(params)

    def add(sampler: int) -> None:
        lc.llama_sampler_chain_add(chain, sampler)

    greedy = options.temperature <= 0.0 and options.samplers is None
    last_n = limits.penalty_window(options.repeat_last_n, num_ctx)
    repeat = options.repeat_penalty if options.repeat_penalty > 0 else 1.0
    eog = eog_tokens(vocab) if grammar is None and (options.ignore_eos or options.min_tokens > 0) else None
    logprobs = options.logprobs or options.top_logprobs > 0
    if options.samplers is not None:
        for name in options.samplers:
            add(_named_sampler(name, options, vocab, last_n, repeat))
        add(lc.llama_sampler_init_dist(resolve_seed(options.seed)))
        return Sampler(chain=chain, grammar=grammar, greedy=False, logprobs=logprobs,
                       top_logprobs=options.top_logprobs, eog=eog, ignore_eos=options.ignore_eos,
                       min_tokens=options.min_tokens)
    if greedy and grammar is None:
        fast = GreedyPenalties(last_n, repeat, options.frequency_penalty, options.presence_penalty)
        return Sampler(chain=0, grammar=None, greedy=True, logprobs=logprobs, top_logprobs=options.top_logprobs,
                       eog=eog, ignore_eos=options.ignore_eos, min_tokens=options.min_tokens, fast_greedy=fast)
    penalise = last_n > 0 and (repeat != 1.0 or options.presence_penalty != 0.0
                               or options.frequency_penalty != 0.0)
    top_k = 1 if greedy else options.top_k
    if penalise:
        only_lowers = repeat >= 1.0 and options.presence_penalty >= 0 and options.frequency_penalty >= 0
        if only_lowers and top_k > 0 and top_k + last_n < vocab.n_vocab:
            add(lc.llama_sampler_init_top_k(top_k + last_n))
        add(lc.llama_sampler_init_penalties(vocab.n_vocab, last_n, repeat, options.frequency_penalty,
                                            options.presence_penalty))
    if greedy:
        add(lc.llama_sampler_init_greedy())
    else:
        if options.top_k > 0:
            add(lc.llama_sampler_init_top_k(options.top_k))
        if 0.0 < options.typical_p < 1.0:
            add(lc.llama_sampler_init_typical(options.typical_p, 1))
        if options.top_p < 1.0:
            add(lc.llama_sampler_init_top_p(options.top_p, 1))
        if options.min_p > 0.0:
            add(lc.llama_sampler_init_min_p(options.min_p, 1))
        add(lc.llama_sampler_init_temp(options.temperature))
        add(lc.llama_sampler_init_dist(resolve_seed(options.seed)))
    return Sampler(chain=chain, grammar=grammar, greedy=greedy, logprobs=logprobs, top_logprobs=options.top_logprobs,
                   eog=eog, ignore_eos=options.ignore_eos, min_tokens=options.min_tokens)


def _named_sampler(name: str, options: SamplingOptions, vocab: Vocab, last_n: int, repeat: float) -> int:
    """One sampler of an explicit ``samplers`` list, as llama.cpp's common sampler builds it (a
    pointer, as the chain takes it)."""
    sampler: int
    if name == "penalties":
        sampler = lc.llama_sampler_init_penalties(vocab.n_vocab, last_n, repeat, options.frequency_penalty,
                                                  options.presence_penalty)
    elif name == "top_k":
        sampler = lc.llama_sampler_init_top_k(options.top_k)
    elif name == "typ_p":
        sampler = lc.llama_sampler_init_typical(options.typical_p, 1)
    elif name == "top_p":
        sampler = lc.llama_sampler_init_top_p(options.top_p, 1)
    elif name == "min_p":
        sampler = lc.llama_sampler_init_min_p(options.min_p, 1)
    elif name == "temperature":
        sampler = lc.llama_sampler_init_temp(options.temperature)
    else:
        assert name == "infill", name  # limits.SAMPLERS, checked by the server
        sampler = lc.llama_sampler_init_infill(vocab.ptr)
    return sampler


def eog_tokens(vocab: Vocab) -> np.ndarray:
    """Every end-of-generation token id of ``vocab``, computed once per model (Vocab.eog_ids)."""
    return vocab.eog_ids()


def accept_prompt(sampler: Sampler, tokens: list[int], last_n: int) -> None:
    """Feed prompt tokens into the penalty history (never into the grammar)."""
    for token in tokens[-last_n:] if last_n > 0 else ():
        if sampler.fast_greedy is not None:
            sampler.fast_greedy.accept(token)
        else:
            lc.llama_sampler_accept(sampler.chain, token)


class GrammarDeadEnd(Exception):
    """No token of the vocabulary can continue the grammar."""


def sample(sampler: Sampler, ctx: lc.llama_context_p, row: int, scratch: TokenData, vocab: Vocab,
           generated: int = 0) -> int:
    """Sample the next token from output row ``row`` and record it in the sampler state.

    ``generated`` is how many tokens the sequence has generated so far (for ``min_tokens``).

    With a grammar, the token must also keep the output valid UTF-8: llama.cpp's grammar
    counts a malformed byte sequence as one character where the text shows several U+FFFD,
    which could break maxLength or a pattern (byte tokens from a small vocabulary do that).
    """
    if sampler.backend:
        assert sampler.fast_greedy is not None
        token = sampled_token(ctx, row, sampler.backend)
        sampler.fast_greedy.accept(token)
        return token
    if sampler.grammar is None:
        if sampler.suppresses_eog(generated):
            assert sampler.eog is not None
            logits_row(ctx, row, vocab.n_vocab)[sampler.eog] = -np.inf  # the context's own row
        if sampler.fast_greedy is not None:
            token = sampler.fast_greedy.pick(logits_row(ctx, row, vocab.n_vocab))
            sampler.fast_greedy.accept(token)
            return token
        return int(lc.llama_sampler_sample(sampler.chain, ctx, row))
    logits = logits_row(ctx, row, vocab.n_vocab)
    scratch.fill(logits)
    lc.llama_sampler_apply(sampler.chain, scratch.ref)
    token = int(scratch.data["id"][scratch.array.selected])
    if vocab.is_eog(token) or not _allowed(sampler, token, scratch, vocab):
        scratch.fill(logits)
        lc.llama_sampler_apply(sampler.grammar, scratch.ref)  # masks in place, keeps order: row i is token i
        _mask_broken_utf8(sampler.utf8_tail, scratch, vocab)
        if not np.isfinite(scratch.data["logit"][: scratch.array.size]).any():
            raise GrammarDeadEnd("no token can continue the grammar")
        lc.llama_sampler_apply(sampler.chain, scratch.ref)
        selected = scratch.array.selected
        token = int(scratch.data["id"][selected])
        if not math.isfinite(float(scratch.data["logit"][selected])) or not (
                vocab.is_eog(token) or _allowed(sampler, token, scratch, vocab)):
            raise GrammarDeadEnd("sampling picked a token the grammar forbids")
    if vocab.is_eog(token):
        return token  # the grammar is complete; nothing to accept
    lc.llama_sampler_accept(sampler.grammar, token)
    lc.llama_sampler_accept(sampler.chain, token)
    sampler.utf8_tail = _incomplete_tail(sampler.utf8_tail + vocab.piece(token))
    return token


def _allowed(sampler: Sampler, token: int, scratch: TokenData, vocab: Vocab) -> bool:
    assert sampler.grammar is not None
    return _valid_utf8_prefix(sampler.utf8_tail + vocab.piece(token)) and _grammar_allows(
        sampler.grammar, token, scratch)


def _valid_utf8_prefix(data: bytes) -> bool:
    try:
        codecs.getincrementaldecoder("utf-8")("strict").decode(data, final=False)
    except UnicodeDecodeError:
        return False
    return True


def _incomplete_tail(data: bytes) -> bytes:
    """The trailing bytes of ``data`` that start a character not finished yet (0-3 bytes)."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 == 0x80:
            continue  # a continuation byte: look further back for the lead byte
        if byte < 0xC0:
            return b""
        need = 4 if byte >= 0xF0 else 3 if byte >= 0xE0 else 2
        return data[-back:] if back < need else b""
    return b""


def _mask_broken_utf8(tail: bytes, scratch: TokenData, vocab: Vocab) -> None:
    """Set -inf on tokens that would make the output invalid UTF-8 (rows are token ids here)."""
    logit = scratch.data["logit"]
    if tail:
        keep = [t for t in vocab.continuation_tokens() if _valid_utf8_prefix(tail + vocab.piece(t))]
        allowed = np.full(vocab.n_vocab, -np.inf, dtype=np.float32)
        allowed[keep] = 0.0
        logit += allowed
    else:
        bad = vocab.broken_utf8_tokens()
        if len(bad):
            logit[bad] = -np.inf


def _grammar_allows(grammar: int, token: int, scratch: TokenData) -> bool:
    scratch.one["id"][0] = token
    scratch.one["logit"][0] = 1.0
    scratch.one_array.size = 1
    scratch.one_array.selected = -1
    scratch.one_array.sorted = False
    lc.llama_sampler_apply(grammar, scratch.one_ref)
    return bool(np.isfinite(scratch.one["logit"][0]))


_ROW_VIEWS: dict[tuple[int, int], np.ndarray] = {}
_MAX_ROW_VIEWS = 1024


def logits_row(ctx: lc.llama_context_p, row: int, n_vocab: int) -> np.ndarray:
    """The context's float32 logits of output ``row``: a view, not a copy (writes reach llama.cpp).

    Views are kept by address: building one (``np.ctypeslib.as_array``) costs 6 us, a lookup 0.4,
    paid for every row of every step. A view holds no memory of its own, and llama.cpp returning
    the same address again means ``n_vocab`` logits are there now, so a kept view is never stale.
    """
    ptr = lc.llama_get_logits_ith(ctx, row)
    if not ptr:
        raise RuntimeError(f"no logits for output row {row}")
    key = (ctypes.addressof(ptr.contents), n_vocab)
    view = _ROW_VIEWS.get(key)
    if view is None:
        if len(_ROW_VIEWS) >= _MAX_ROW_VIEWS:  # the buffer moved many times (contexts come and go)
            _ROW_VIEWS.clear()
        view = _ROW_VIEWS[key] = np.ctypeslib.as_array(ptr, shape=(n_vocab,))
    return view


def token_logprobs(ctx: lc.llama_context_p, row: int, n_vocab: int, token: int, top: int,
                   vocab: Vocab) -> TokenLogprob:
    """Log-probability of ``token`` under the model's raw distribution, plus the ``top`` best."""
    logits = logits_row(ctx, row, n_vocab).astype(np.float64)
    peak = logits.max()
    lse = peak + math.log(float(np.exp(logits - peak).sum()))
    best: tuple[tuple[str, float], ...] = ()
    if top > 0:
        idx = np.argpartition(-logits, top)[:top] if top < n_vocab else np.arange(n_vocab)
        idx = idx[np.argsort(-logits[idx], kind="stable")]
        best = tuple((vocab.text_of(int(i)), float(logits[i] - lse)) for i in idx)
    return TokenLogprob(token=vocab.text_of(token), logprob=float(logits[token] - lse), top=best)

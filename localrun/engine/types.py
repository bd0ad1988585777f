"""The engine's public contract: option structs, requests and the events a request yields.

Plain dataclasses, no llama_cpp import, so the runtime and server can use them without
loading native code. Load-time options (a difference means reload) are separate from
per-request sampling options, as in Ollama.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from ..jsontypes import JSONObject
from ..modelkind import ModelKind

# What a request constrains its output to: None (free text), "json" (any JSON value) or a JSON Schema
OutputFormat = str | JSONObject | None

MAX_UBATCH = 512  # tokens llama.cpp computes at once (n_ubatch): its compute buffers scale with this


@dataclass(frozen=True, slots=True)
class LoadOptions:
    """Options fixed when a model is loaded; a request asking for different ones reloads it."""

    num_ctx: int = 4096          # the most tokens one request may hold (prompt + output); capped at the pool
    # max tokens per llama_decode call (a step's prefill budget); llama.cpp runs them in physical
    # batches of at most MAX_UBATCH (llama-server's -b 2048 -ub 512): a burst's prompts share one step
    num_batch: int = 2048
    num_gpu: int | None = None   # layers to offload; None = decided by the fit check
    main_gpu: int = 0
    num_thread: int | None = None  # None = follow the free cores (threads.py); a number pins it
    use_mmap: bool = True
    num_parallel: int = 4        # sequence slots (the daemon sizes them from memory: hardware/memory.py)
    # KV cells the running requests share (the unified KV cache, the "pool"); None: num_ctx x num_parallel.
    # The daemon sizes it from the memory free after the weights (hardware/memory.py plan_context).
    context_pool: int | None = None
    adapter: str | None = None   # path to a LoRA adapter GGUF
    projector: str | None = None  # path to a vision model's projector (mmproj) GGUF: images (engine/vision.py)
    # Deterministic mode (as SGLang's): a seeded request gives the same text whatever runs beside it.
    # Off (default): llama.cpp's fastest kernels; a seeded request repeats its text when it runs alone.
    # On: per-row matmuls for every batch size and a BF16-key cache (engine/native.py), ~15-20 %
    # slower prompt processing. Per process: a runner decodes with one kind of matmul kernel.
    batch_invariant: bool = False
    kv_cache_type: str = "auto"  # "auto" | "f16" | "bf16": auto = bf16 with batch_invariant on CPU, else f16
    # llama.cpp RPC workers (host:port) the layers are spread over: LOCALRUN_RPC_SERVERS, set by the
    # daemon for every load, never by a request (engine/rpc.py)
    rpc_servers: tuple[str, ...] = ()
    # bytes of host RAM for cached prefixes moved out of the context (engine/host_cache.py; 0: none):
    # LOCALRUN_PREFIX_CACHE_RAM, set by the daemon for every load
    prefix_cache_ram: int = 2 << 30
    # greedy requests draft tokens from their own text and keep what greedy confirms (engine/drafter.py):
    # LOCALRUN_SPECULATIVE, set by the daemon for every load
    speculative: bool = True
    # greedy requests sampled in llama.cpp's graph (engine/backend_sampler.py): LOCALRUN_BACKEND_SAMPLING,
    # set by the daemon for every load
    backend_sampling: bool = False
    # llama.cpp's repacked CPU weight layouts (use_extra_bufts; off = its --no-repack). Off by default: one
    # VM's CPU advertised AMX it could not run (SIGSEGV); the runner turns it on where hardware/repack.py's
    # probe found it safe
    repack: bool = False

    @property
    def pool(self) -> int:
        """KV cells of the context: ``context_pool``, else ``num_ctx * num_parallel``."""
        return self.context_pool if self.context_pool is not None else self.num_ctx * self.num_parallel


@dataclass(frozen=True, slots=True)
class SamplingOptions:
    """Per-request sampling; defaults are Ollama's."""

    temperature: float = 0.8     # 0 = greedy
    top_k: int = 40              # 0 = disabled
    top_p: float = 0.9           # 1.0 = disabled
    min_p: float = 0.0
    typical_p: float = 1.0
    repeat_penalty: float = 1.1
    repeat_last_n: int = 64      # -1 = whole context, 0 = disabled
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int | None = None      # None = random
    num_predict: int | None = None  # None (Ollama's -1) = until end of generation or context
    stop: tuple[str, ...] = ()
    logprobs: bool = False
    top_logprobs: int = 0
    # End-of-generation control (vLLM's names). ignore_eos: EOG tokens are never sampled, so only
    # num_predict, a stop string or the context end the output. min_tokens: the same for the first
    # min_tokens generated tokens. A grammar (format) still ends its output when it is complete.
    ignore_eos: bool = False
    min_tokens: int = 0
    # llama-server's ``samplers``: the chain in this order (names of limits.SAMPLERS), then dist; None:
    # the usual chain (sampling.py). Only what is named runs: no temperature unless it is listed.
    samplers: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class PrefixCacheLocation:
    """Where a model's prefix cache is saved between loads: a folder, and the store's digest of
    the model, which the saved file must name to be used (engine/prefix_store.py)."""

    directory: str
    model_digest: str


@dataclass(frozen=True, slots=True)
class Infill:
    """A fill-in-the-middle prompt in parts, as llama-server's ``/infill`` takes it: the code before
    and after the gap, what is already typed in it (``middle``), and other files as context
    (``extra``: (filename, text) pairs). The engine puts them together with the model's FIM tokens
    (engine/infill.py)."""

    prefix: str
    suffix: str
    middle: str = ""
    extra: tuple[tuple[str, str], ...] = ()


class Truncation(enum.Enum):
    """What to do with a prompt longer than the context."""

    FRONT = "front"    # drop the oldest tokens after the first num_keep (system prompt kept)
    REJECT = "reject"  # raise ContextOverflow


@dataclass(slots=True)
class GenerateRequest:
    """One completion: a prompt (text, token ids or an :class:`Infill`) and how to sample it.

    ``format`` is None, ``"json"`` or a JSON Schema dict; ``grammar`` is raw GBNF (with a ``format``
    too, the format becomes its rule ``format-value``: engine/grammar.py).
    ``format_frame`` (prefix, suffix) is text the output must have around the formatted JSON: a
    forced tool call in the model's own format, e.g. ``("<tool_call>\n", "\n</tool_call>")``.
    ``num_keep`` is how many leading prompt tokens FRONT truncation keeps (the system prompt).
    ``cache_reuse`` (llama-server's ``n_cache_reuse``, the ``cache_reuse`` option): past the cached
    prefix, runs of at least this many tokens that a cached prompt holds further along are reused with
    their positions shifted, not read again (kvcache.py, "Shifted reuse"); 0 reuses only exact
    prefixes. None: the model's setting (the service fills in its Modelfile PARAMETER or the request's
    option), else 0.
    """

    prompt: str | list[int] | Infill
    sampling: SamplingOptions = field(default_factory=SamplingOptions)
    format: OutputFormat = None
    grammar: str | None = None
    format_frame: tuple[str, str] | None = None
    truncation: Truncation = Truncation.FRONT
    num_keep: int = 0
    add_special: bool = True  # add BOS when the prompt is text
    cache_reuse: int | None = None
    # Someone is waiting at a chat prompt (the TUI, `localrun run`): admitted and prefilled before
    # batch work. None: decided by the prompt's length (short prompts count as interactive).
    interactive: bool | None = None
    # Encoded image files (PNG, JPEG...), one per IMAGE_MARKER in a text prompt, in order (engine/vision.py)
    images: tuple[bytes, ...] = ()


class DoneReason(enum.Enum):
    STOP = "stop"          # end-of-generation token or a stop string (DoneEvent.stop_string says which)
    LENGTH = "length"      # num_predict reached or the context is full
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True, slots=True)
class TokenEvent:
    """New text for the stream: always whole UTF-8 characters, never special tokens."""

    text: str
    logprobs: tuple[TokenLogprob, ...] = ()


@dataclass(frozen=True, slots=True)
class DoneEvent:
    """The last event of a successful request; durations are nanoseconds."""

    done_reason: DoneReason
    prompt_eval_count: int       # prompt tokens (after truncation)
    cached_tokens: int           # of which came from the prefix cache
    eval_count: int              # generated tokens
    prompt_eval_duration: int
    eval_duration: int
    truncated_tokens: int = 0    # prompt tokens dropped by FRONT truncation
    context: tuple[int, ...] = ()  # prompt + generated token ids (Ollama's `context`)
    stop_string: str | None = None  # the request's stop string that ended the output (STOP only), else None


@dataclass(frozen=True, slots=True)
class ErrorEvent:
    """The last event of a failed request; ``error`` is a LocalrunError."""

    error: Exception


Event = TokenEvent | DoneEvent | ErrorEvent


def is_last(event: object) -> bool:
    """Whether ``event`` ends its request's stream (a DoneEvent or an ErrorEvent)."""
    return isinstance(event, (DoneEvent, ErrorEvent))


EmbedInput = str | list[int]
"""One input to embed: text (tokenized with the model's BOS), or token ids used exactly as given."""


@dataclass(frozen=True, slots=True)
class EmbedResult:
    embeddings: list[list[float]]
    prompt_eval_count: int
    truncated: list[bool]        # per input: was it cut to fit the context


@dataclass(frozen=True, slots=True)
class RerankResult:
    scores: list[float]          # per document, in the order given: the model's relevance score
    prompt_eval_count: int       # tokens read, every (query, document) pair together
    truncated: list[bool]        # per document: was it cut so its pair fits the context


@dataclass(frozen=True, slots=True)
class EngineStats:
    """A snapshot for /api/ps and /metrics."""

    slots_total: int
    slots_active: int
    queued: int
    kv_cells_total: int
    kv_cells_used: int
    prefix_cache_hit_tokens: int   # cumulative
    prompt_tokens: int             # cumulative
    generated_tokens: int          # cumulative
    kv_cache_resets: int = 0       # cumulative: times the deterministic mode cleared a filled-up cache
    host_cache_tokens: int = 0     # cached prefix tokens held in host RAM (the prefix cache's second tier)
    host_cache_bytes: int = 0      # their size
    draft_tokens: int = 0          # cumulative: tokens speculative decoding drafted (engine/drafter.py)
    accepted_tokens: int = 0       # cumulative: drafted tokens greedy sampling confirmed
    preemptions: int = 0           # cumulative: requests paused because the KV pool was full (admission.py)
    image_tokens: int = 0          # cumulative: image positions computed (an image from the cache counts none)
    threads_decode: int = 0        # threads a decode step runs on now (engine/threads.py); 0 = not reported
    threads_prefill: int = 0       # ... a step with prompt tokens
    threads_cores: int = 0         # the cores this runner may use
    threads_pinned: int = 0        # 1 when num_thread fixed the counts
    other_load_pct: int = 0        # CPU other processes took at the last sample, in percent of one core


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """What a loaded model is (for /api/show and /api/ps); sizes in bytes, lengths in tokens."""

    architecture: str
    n_params: int
    n_ctx_train: int
    n_embd: int
    n_layer: int
    n_vocab: int
    chat_template: str | None      # the GGUF's tokenizer.chat_template
    bos_text: str
    eos_text: str
    size_bytes: int
    num_ctx: int                   # the most tokens one request may hold (capped at n_ctx_train and the pool)
    num_parallel: int
    context_pool: int = 0          # KV cells the running requests share (0: not reported)
    n_swa: int = 0                 # sliding-window size, 0 = none
    kind: ModelKind = ModelKind.GENERATION  # what it does: text, vectors or rerank scores
    prefix_cache: bool = True      # False: the model's cache cannot be shared (recurrent models)
    vision: bool = False           # a projector is loaded: prompts may hold images
    # What llama.cpp reports it placed (its load log), not what was asked for:
    gpu_layers: int = 0            # offloadable layers it put on a GPU
    offload_layers: int = 0        # offloadable layers in all (n_layer + 1 for the output layer)
    gpu_buffer_bytes: int = 0      # weights in GPU buffers
    cpu_buffer_bytes: int = 0      # weights in host buffers
    # weights per llama.cpp buffer (CPU_Mapped, RPC0[h:p]...)
    buffer_bytes: dict[str, int] = field(default_factory=dict)
    rpc_servers: tuple[str, ...] = ()  # RPC workers the model was loaded with

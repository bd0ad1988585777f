"""One error hierarchy for localrun.

Every error knows the HTTP status it maps to and a short machine-readable ``code``;
the server renders it as ``{"error": msg}`` on /api and as an OpenAI error object on /v1,
the CLI prints ``Error: msg`` and exits non-zero. ``param`` names the request field at fault
where an API reports one (OpenAI's error object).

    LocalrunError                      500 internal
    ├── ConfigError                    bad LOCALRUN_* value (startup)
    ├── InvalidRequest                 400 bad user input
    │   ├── InvalidName                model name rejected
    │   ├── ModelfileError             Modelfile syntax/semantics (carries line number)
    │   ├── InvalidModelFile           not a GGUF / truncated / impossible tensors
    │   ├── TemplateError              chat template failed to render or escaped the sandbox
    │   │   └── TemplateLimit          chat template exceeded a bound (steps, sizes, CPU, memory, time)
    │   ├── GrammarError               format / JSON schema cannot be enforced
    │   ├── ContextOverflow            prompt longer than num_ctx and truncation refused
    │   ├── OptionError                out-of-range or wrong-typed option
    │   ├── ThreadUnsupported          an Anthropic message thread: this server keeps no conversation
    │   ├── PreviousResponseNotFound   a Responses ``previous_response_id`` names no stored response
    │   └── UnsupportedCapability      the model cannot do what was asked (tools, thinking, insert)
    ├── Unauthorized                   401 missing/wrong API key
    ├── Forbidden                      403 foreign Host header / origin
    ├── NotFound                       404
    │   ├── ModelNotFound              model not in the store
    │   ├── ResponseNotFound           a stored Responses API response that is not (or no longer) kept
    │   └── AgentNotFound              `localrun launch`: the coding agent is not installed
    ├── PayloadTooLarge                413 request body over the limit
    ├── Cancelled                      499 the client went away: work done for it stops
    ├── ModelTooLarge                  507 the model can never fit in memory
    ├── Busy                           503 queue full (carries retry_after seconds)
    ├── StoreError                     500 store I/O problem
    │   └── CorruptBlob                stored bytes do not match their digest
    ├── PullError                      502 download failed
    │   └── DigestMismatch             downloaded bytes do not match the advertised hash
    ├── EngineError                    500 llama.cpp returned an error
    │   └── FrameTooLarge              a message over its channel's frame limit (not sent)
    ├── RunnerCrashed                  502 the model's runner process died
    │   ├── RunnerGone                 it was gone before the request reached it (the daemon retries once)
    │   └── BadFrame                   another localrun process sent something that is not a frame
    ├── UpstreamError                  502 an upstream server failed, or answered what localrun cannot read
    │   └── UpstreamUnavailable        503 no member of an upstream pool answers (all failed or cooling down)
    ├── DaemonUnavailable              503 no daemon answers at LOCALRUN_HOST (client side)
    └── BenchError                     `localrun bench` cannot measure a target (unreachable, rejects requests)
"""

from __future__ import annotations


class LocalrunError(Exception):
    """Base of every error localrun raises on purpose."""

    status: int = 500
    code: str = "internal_error"
    param: str | None = None

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class ConfigError(LocalrunError):
    code = "config_error"


class InvalidRequest(LocalrunError):
    status = 400
    code = "invalid_request"


class InvalidName(InvalidRequest):
    code = "invalid_name"


class ModelfileError(InvalidRequest):
    """A Modelfile problem; ``line`` is 1-based, or None when not tied to a line."""

    code = "invalid_modelfile"

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(f"line {line}: {message}" if line is not None else message)
        self.line = line


class InvalidModelFile(InvalidRequest):
    code = "invalid_model_file"


class TemplateError(InvalidRequest):
    code = "template_error"


class TemplateLimit(TemplateError):
    """A chat template exceeded a bound: loop steps, value sizes, or its worker's CPU, memory or time."""

    code = "template_limit"


class GrammarError(InvalidRequest):
    code = "unsupported_format"


class ContextOverflow(InvalidRequest):
    """A prompt longer than the request's maximum context, where cutting it was not allowed.

    ``prompt_tokens`` and ``max_tokens`` (the request's maximum, ``n_ctx``) are the numbers every
    API names in its own words (``server/anthropic/convert.py`` says "prompt is too long: N tokens > M
    maximum"); None when not known (an error rebuilt from an old runner's message).
    """

    code = "context_length_exceeded"

    def __init__(self, message: str, prompt_tokens: int | None = None, max_tokens: int | None = None) -> None:
        super().__init__(message)
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens


class OptionError(InvalidRequest):
    code = "invalid_option"


class ThreadUnsupported(InvalidRequest):
    """A ``/v1/messages`` request with a ``thread``: its code is the ``error.details.error_code`` on
    which Anthropic's SDKs send the turn again with the whole conversation (the middleware puts it there)."""

    code = "thread_unsupported_request"


class PreviousResponseNotFound(InvalidRequest):
    """``previous_response_id`` names a response this server does not keep (never stored, deleted,
    evicted, or kept by a daemon since restarted): OpenAI's 400 and code, on which clients resend."""

    code = "previous_response_not_found"
    param = "previous_response_id"


class UnsupportedCapability(InvalidRequest):
    """A request needs what the model's template or file lacks: "MODEL does not support tools"."""

    code = "unsupported_capability"


class Unauthorized(LocalrunError):
    status = 401
    code = "unauthorized"


class Forbidden(LocalrunError):
    status = 403
    code = "forbidden"


class NotFound(LocalrunError):
    status = 404
    code = "not_found"


class ModelNotFound(NotFound):
    code = "model_not_found"


class ResponseNotFound(NotFound):
    code = "response_not_found"


class AgentNotFound(NotFound):
    code = "agent_not_found"


class PayloadTooLarge(LocalrunError):
    status = 413
    code = "payload_too_large"


class Cancelled(LocalrunError):
    """Raised inside work (hashing, downloading) whose client went away, to stop it; nobody reads it."""

    status = 499
    code = "client_closed_request"


class ModelTooLarge(LocalrunError):
    status = 507
    code = "insufficient_memory"


class Busy(LocalrunError):
    status = 503
    code = "server_busy"

    def __init__(self, message: str, retry_after: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class StoreError(LocalrunError):
    code = "store_error"


class CorruptBlob(StoreError):
    code = "corrupt_blob"


class PullError(LocalrunError):
    status = 502
    code = "pull_failed"


class DigestMismatch(PullError):
    code = "digest_mismatch"


class EngineError(LocalrunError):
    code = "engine_error"


class RunnerCrashed(LocalrunError):
    status = 502
    code = "runner_crashed"


class RunnerGone(RunnerCrashed):
    """The runner had died before the request reached it: nothing of it ran, so it can be sent again
    (to a new runner). A crash after the request was sent is a plain RunnerCrashed: that request may
    be what killed it."""


class BadFrame(RunnerCrashed):
    """Another localrun process sent something that is not a frame (:mod:`localrun.runtime.framing`)."""


class FrameTooLarge(EngineError):
    """A message is over its channel's frame limit; refused before anything is sent."""


class UpstreamError(LocalrunError):
    """An upstream (``localrun upstream``) failed: connection lost, 5xx, or a reply localrun cannot read.

    Messages name the upstream and never hold its API key (``upstream.transport.redact``).
    """

    status = 502
    code = "upstream_error"


class UpstreamUnavailable(UpstreamError):
    """Every member of the pool serving the model failed before answering, or is cooling down."""

    status = 503
    code = "upstream_unavailable"


class DaemonUnavailable(LocalrunError):
    status = 503
    code = "daemon_unavailable"


class BenchError(LocalrunError):
    """`localrun bench` cannot measure a target: unreachable, no model, or it rejects every request."""

    code = "bench_failed"


def _by_code() -> dict[str, type[LocalrunError]]:
    table: dict[str, type[LocalrunError]] = {}
    pending: list[type[LocalrunError]] = [LocalrunError]
    while pending:
        cls = pending.pop(0)
        table.setdefault(cls.code, cls)
        pending.extend(cls.__subclasses__())
    return table


BY_CODE: dict[str, type[LocalrunError]] = _by_code()
"""Every error class by its ``code``: the one mapping the runner pipe and the HTTP client rebuild errors with."""


def from_code(code: object, message: str, *, retry_after: float = 1.0, prompt_tokens: int | None = None,
              max_tokens: int | None = None) -> LocalrunError | None:
    """The error whose ``code`` is ``code`` carrying ``message``; None for a code nobody here defines.

    ``retry_after`` is used only when the code is Busy's, ``prompt_tokens``/``max_tokens`` only when
    it is ContextOverflow's. Never imports or evaluates what ``code`` names.
    """
    cls = BY_CODE.get(code) if isinstance(code, str) else None
    if cls is None:
        return None
    if cls is Busy:
        return Busy(message, retry_after)
    if cls is ContextOverflow:
        return ContextOverflow(message, prompt_tokens, max_tokens)
    return cls(message)

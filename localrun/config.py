"""Settings: one accessor per ``LOCALRUN_*`` environment variable.

Each accessor reads the environment when called (so tests can monkeypatch it), validates the
value and raises :class:`~localrun.errors.ConfigError` naming the variable on a bad value:
never a silent fallback. :func:`load_settings` reads them all at once, for startup.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from .engine.limits import MAX_PARALLEL, MAX_THREADS  # pure: the option range table
from .errors import ConfigError, InvalidRequest
from .upstream.spec import UpstreamSpec, parse_env  # pure parsing: stdlib and errors only

APP_NAME = "localrun"
DEFAULT_PORT = 11435
# The starter: the model `localrun run` chats with when no name is given, the TUI's default and the
# bench's. Its PyPI packages (the `starter` extra) and import are localrun.store.starter's.
STARTER_MODEL = "qwen2.5-coder:0.5b"
_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")


def _env(name: str) -> str | None:
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return None
    return value.strip()


@dataclass(frozen=True, slots=True)
class HostPort:
    host: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def is_loopback(self) -> bool:
        return self.host in ("127.0.0.1", "localhost", "::1") or self.host.startswith("127.")


def parse_host(value: str, variable: str = "LOCALRUN_HOST") -> HostPort:
    """Parse ``[scheme://]host[:port]``, ``:port`` or ``[v6]:port`` (port defaults to 11435)."""
    raw = value.strip()
    raw = re.sub(r"^https?://", "", raw).rstrip("/")
    host, port_s = raw, ""
    if raw.startswith("["):
        end = raw.find("]")
        if end < 0:
            raise ConfigError(f"{variable}={value!r}: unclosed '[' in IPv6 address")
        host, rest = raw[1:end], raw[end + 1 :]
        if rest:
            if not rest.startswith(":"):
                raise ConfigError(f"{variable}={value!r}: expected ':port' after ']'")
            port_s = rest[1:]
    elif raw.count(":") == 1:
        host, port_s = raw.split(":")
    elif raw.count(":") > 1:
        host = raw  # bare IPv6 address
    host = host or "127.0.0.1"
    if not port_s:
        return HostPort(host, DEFAULT_PORT)
    if not port_s.isdigit() or not 0 < int(port_s) < 65536:
        raise ConfigError(f"{variable}={value!r}: port must be a number from 1 to 65535")
    return HostPort(host, int(port_s))


def parse_duration(value: str | int | float, variable: str = "keep_alive") -> float | None:
    """Parse an Ollama-style duration into seconds; ``None`` means forever.

    Accepts a number of seconds (``300``, ``-1``), or Go-style ``5m``, ``1h30m``, ``250ms``,
    ``-1m``. Any negative value means "keep forever"; ``0`` means "unload now".
    """
    if isinstance(value, bool):
        raise ConfigError(f"{variable}: expected a duration, got {value!r}")
    if isinstance(value, (int, float)):
        return None if value < 0 else float(value)
    text = str(value).strip()
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        return None if seconds < 0 else seconds
    negative = text.startswith("-")
    body = text[1:] if negative else text
    if not body or _DURATION_RE.sub("", body) != "":
        raise ConfigError(
            f"{variable}={value!r}: expected a duration like '5m', '1h30m', '300' or '-1'"
        )
    unit = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    total = sum(float(n) * unit[u] for n, u in _DURATION_RE.findall(body))
    return None if negative and total > 0 else total


def _positive_int(variable: str, default: int, minimum: int = 1) -> int:
    raw = _env(variable)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{variable}={raw!r}: expected a whole number") from None
    if value < minimum:
        raise ConfigError(f"{variable}={raw!r}: must be at least {minimum}")
    return value


def host() -> HostPort:
    """``LOCALRUN_HOST``: where the daemon listens and the client connects. Default ``127.0.0.1:11435``."""
    raw = _env("LOCALRUN_HOST")
    return parse_host(raw) if raw else HostPort("127.0.0.1", DEFAULT_PORT)


def models_dir() -> Path:
    """``LOCALRUN_MODELS``: the model store. Default: the platformdirs user data dir + ``models``."""
    raw = _env("LOCALRUN_MODELS")
    if raw is None:
        return Path(platformdirs.user_data_dir(APP_NAME)) / "models"
    path = Path(raw).expanduser()
    if path.exists() and not path.is_dir():
        raise ConfigError(f"LOCALRUN_MODELS={raw!r}: exists and is not a directory")
    return path


def data_dir() -> Path:
    """Per-user data (conversations, history): the platformdirs user data dir."""
    return Path(platformdirs.user_data_dir(APP_NAME))


def config_dir() -> Path:
    """Per-user configuration (the upstreams file): the platformdirs user config dir."""
    return Path(platformdirs.user_config_dir(APP_NAME))


def upstreams_file() -> Path:
    """Where ``localrun upstream add`` keeps the upstreams: ``upstreams.json`` in :func:`config_dir`."""
    return config_dir() / "upstreams.json"


def upstreams() -> tuple[UpstreamSpec, ...]:
    """``LOCALRUN_UPSTREAMS``: upstream servers besides those ``localrun upstream add`` saved. Default none.

    ``NAME=URL,NAME=URL`` (the same NAME twice makes a pool; a URL ending in ``/v1`` is OpenAI's
    API, ``/api`` Ollama's, otherwise the server is asked), or a JSON list of objects with
    ``name``, ``url`` and optionally ``api_key_env`` (the NAME of a variable holding the key),
    ``models`` and ``api``. Models appear as ``NAME/model``.
    """
    raw = _env("LOCALRUN_UPSTREAMS")
    if raw is None:
        return ()
    try:
        return parse_env(raw)
    except InvalidRequest as exc:
        raise ConfigError(f"LOCALRUN_UPSTREAMS: {exc}") from None


def upstream_api_key(variable: str) -> str | None:
    """The API key of an upstream: the value of the environment variable its config names, or None.

    Read when a request goes out (a key exported later reaches a running daemon only through its
    environment, i.e. after a restart). Never logged or shown.
    """
    return _env(variable)


_RPC_RE = re.compile(r"^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):(\d{1,5})$")


def rpc_servers() -> tuple[str, ...]:
    """``LOCALRUN_RPC_SERVERS``: llama.cpp RPC workers (``host:port,host:port``) a model's layers are
    split across when it loads. Default none (the model loads on this machine).

    Needs llama-cpp-python built with ``-DGGML_RPC=on`` and ``rpc-server`` running on each host
    (packaging/README.md). RPC traffic is unauthenticated and unencrypted: private networks only.
    """
    raw = _env("LOCALRUN_RPC_SERVERS")
    if raw is None:
        return ()
    items = tuple(dict.fromkeys(i.strip() for i in raw.split(",") if i.strip()))
    for item in items:
        m = _RPC_RE.match(item)
        if m is None or not 0 < int(m.group(2)) < 65536:
            raise ConfigError(f"LOCALRUN_RPC_SERVERS: {item!r} is not host:port (e.g. 192.168.1.20:50052)")
    if not items:
        raise ConfigError("LOCALRUN_RPC_SERVERS: expected host:port[,host:port...]")
    return items


def log_dir() -> Path:
    """Where the background daemon writes its log: the platformdirs user log dir."""
    return Path(platformdirs.user_log_dir(APP_NAME))


def keep_alive() -> float | None:
    """``LOCALRUN_KEEP_ALIVE``: how long an idle model stays loaded. Default ``5m``.

    Seconds; ``None`` means forever (a negative value), ``0`` unloads after each request.
    """
    raw = _env("LOCALRUN_KEEP_ALIVE")
    return 300.0 if raw is None else parse_duration(raw, "LOCALRUN_KEEP_ALIVE")


def max_loaded_models() -> int:
    """``LOCALRUN_MAX_LOADED_MODELS``: models resident at once. Default 3 (Ollama's CPU default)."""
    return _positive_int("LOCALRUN_MAX_LOADED_MODELS", 3)


def num_parallel() -> int | None:
    """``LOCALRUN_NUM_PARALLEL``: sequence slots per loaded model.

    Default (unset or ``auto``): ``None``, sized per model when it loads, from free memory and the model's KV cache
    bytes per token (``hardware.memory.default_slots``: up to 16, since batched decode on CPU keeps
    gaining throughput up to about 16 sequences). ``localrun ps`` shows the number chosen.
    """
    raw = _env("LOCALRUN_NUM_PARALLEL")
    if raw is None or raw.lower() == "auto":
        return None
    value = _positive_int("LOCALRUN_NUM_PARALLEL", 1)
    if value > MAX_PARALLEL:
        raise ConfigError(f"LOCALRUN_NUM_PARALLEL={raw!r}: at most {MAX_PARALLEL} sequence slots per model")
    return value


def num_thread() -> int | None:
    """``LOCALRUN_NUM_THREAD``: threads every model's kernels run on, for decode and prefill alike.

    Default (unset, ``auto`` or ``0``): ``None``, each runner follows the cores other processes leave
    free and re-checks while it runs (``engine/threads.py``). A number pins the count, as a request's
    or a Modelfile's ``num_thread`` does (those win over this).
    """
    raw = _env("LOCALRUN_NUM_THREAD")
    if raw is None or raw.lower() == "auto":
        return None
    value = _positive_int("LOCALRUN_NUM_THREAD", 0, minimum=0)
    if value > MAX_THREADS:
        raise ConfigError(f"LOCALRUN_NUM_THREAD={raw!r}: at most {MAX_THREADS} (ggml's limit)")
    return value or None


def context_length() -> int | None:
    """``LOCALRUN_CONTEXT_LENGTH``: the most tokens one request may hold, for every model.

    Default (unset or ``auto``): ``None``, each model's trained context, or as much of it as the
    KV pool sized from free memory holds (``hardware.memory.plan_context``). A number above a
    model's trained context means that model's trained context, as Ollama's
    ``OLLAMA_CONTEXT_LENGTH`` does. A Modelfile's or a request's ``num_ctx`` overrides it.
    """
    raw = _env("LOCALRUN_CONTEXT_LENGTH")
    if raw is None or raw.lower() == "auto":
        return None
    return _positive_int("LOCALRUN_CONTEXT_LENGTH", 0, minimum=16)


KV_CACHE_TYPES = ("auto", "f16", "bf16")


def kv_cache_type() -> str:
    """``LOCALRUN_KV_CACHE_TYPE``: how the KV cache stores keys and values: ``auto`` (default), ``bf16``, ``f16``.

    Both types take 2 bytes per value. ``auto`` is ``f16`` unless the model is loaded with
    batch_invariant on CPU, where it is ``bf16`` (keys in BF16, values in F16): the engine's
    attention then takes the same path for every batch, so seeded output repeats whatever runs
    alongside. ``f16`` is faster at prefilling long prompts on CPU, e.g. 0.52 s instead of 0.75 s
    to the first token after a cached 1,300-token prefix (BENCHMARKS.md).
    """
    raw = _env("LOCALRUN_KV_CACHE_TYPE")
    if raw is None:
        return "auto"
    value = raw.strip().lower()
    if value not in KV_CACHE_TYPES:
        raise ConfigError(f"LOCALRUN_KV_CACHE_TYPE={raw!r}: expected one of {', '.join(KV_CACHE_TYPES)}")
    return value


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def _switch(name: str, *, default: bool) -> bool:
    """An on/off variable: 1/true/yes/on or 0/false/no/off (any case); unset or empty is ``default``."""
    raw = _env(name)
    if raw is None:
        return default
    value = raw.lower()
    if value not in _TRUE + _FALSE:
        raise ConfigError(f"{name}={raw!r}: expected 1 or 0")
    return value in _TRUE


def repack() -> bool | None:
    """``LOCALRUN_REPACK``: load CPU weights in llama.cpp's repacked layouts (``1``) or not (``0``, its
    ``--no-repack``). Default (unset or ``auto``): ``None``, a child process tries them once per CPU
    model and the answer is remembered (``hardware/repack.py``); where they crash, models load without.
    """
    raw = _env("LOCALRUN_REPACK")
    if raw is None or raw.lower() == "auto":
        return None
    return _switch("LOCALRUN_REPACK", default=False)


def backend_sampling() -> bool:
    """``LOCALRUN_BACKEND_SAMPLING``: greedy requests (temperature 0, no grammar, no logprobs, not
    drafting) are sampled inside llama.cpp's decode graph, so only the chosen token leaves the device
    (``engine/backend_sampler.py``). Off by default: it is meant for models whose output layer is on a
    GPU, where it has not been measured yet (llama.cpp calls the API experimental); on a CPU the graph's
    sampling costs more than the host's argmax it replaces.
    """
    return _switch("LOCALRUN_BACKEND_SAMPLING", default=False)


def batch_invariant() -> bool:
    """``LOCALRUN_BATCH_INVARIANT``: the default of the ``batch_invariant`` load option (deterministic
    mode: seeded output independent of the requests decoded alongside). Default off.

    Off (``0``): llama.cpp's fastest kernels and, with ``auto``, an F16 KV cache; a seeded request
    repeats its text when it runs alone. On (``1``), also alone or among other requests: the CPU
    backend computes every matmul with its per-row kernels (llama.cpp switches K-quant matmuls to
    a tiled kernel that rounds differently once a batch holds 8 tokens) and ``auto`` picks a BF16
    KV cache; costs about 15-20 % of prompt-processing speed on K-quant models. A model's
    Modelfile (``PARAMETER batch_invariant true``) or a request's options can ask for it too.
    GPU kernels are not covered either way.
    """
    return _switch("LOCALRUN_BATCH_INVARIANT", default=False)


def speculative() -> bool:
    """``LOCALRUN_SPECULATIVE``: greedy requests (temperature 0, no grammar) draft tokens from their own
    text and keep those the model confirms (speculative decoding without a draft model:
    engine/drafter.py). The output is the tokens greedy decoding gives without it; repetitive
    output (code, quotes, loops) comes out several tokens per step. Default on; ``0`` turns it off.
    Sampled and constrained requests and the deterministic mode never draft.
    """
    return _switch("LOCALRUN_SPECULATIVE", default=True)


def fetch_images() -> bool:
    """``LOCALRUN_FETCH_IMAGES``: whether the daemon downloads images that requests name by an http(s)
    URL (OpenAI ``image_url``, Responses ``input_image``, Anthropic ``source.type: url``). Default off:
    nothing leaves the machine, and such a request is a 400 that says so. On (``1``), each image is
    fetched once per request (20 MB at most, 15 s, images only) and then read like one sent inline.
    """
    return _switch("LOCALRUN_FETCH_IMAGES", default=False)


def prefix_cache_dir() -> Path | None:
    """``LOCALRUN_PREFIX_CACHE``: where each model's prefix cache is saved when it unloads and found
    again when it loads (one file per model digest, checked against it). Default: the platformdirs
    user cache dir + ``prefix-cache``; ``off`` keeps the cache in memory only."""
    raw = _env("LOCALRUN_PREFIX_CACHE")
    if raw is None:
        return Path(platformdirs.user_cache_dir(APP_NAME)) / "prefix-cache"
    if raw.lower() in _FALSE:
        return None
    path = Path(raw).expanduser()
    if path.exists() and not path.is_dir():
        raise ConfigError(f"LOCALRUN_PREFIX_CACHE={raw!r}: exists and is not a directory")
    return path


_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "kb": 1000, "m": 1 << 20, "mib": 1 << 20,
               "mb": 1000**2, "g": 1 << 30, "gib": 1 << 30, "gb": 1000**3}


def prefix_cache_ram() -> int:
    """``LOCALRUN_PREFIX_CACHE_RAM``: host RAM, per loaded model, for cached prefixes moved out of
    the KV cache so they do not slow down decoding (``512MiB``, ``2GiB``, ``4G``, a byte count;
    ``0`` or ``off``: none, idle prefixes then stay in the KV cache). Default: 2 GiB, at most an
    eighth of the machine's memory. Only what is cached takes memory."""
    raw = _env("LOCALRUN_PREFIX_CACHE_RAM")
    if raw is None:
        try:
            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):  # not POSIX
            total = 16 << 30
        return min(2 << 30, total // 8)
    if raw.lower() in _FALSE:
        return 0
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([a-zA-Z]*)", raw)
    unit = _SIZE_UNITS.get(match.group(2).lower()) if match else None
    if match is None or unit is None:
        raise ConfigError(f"LOCALRUN_PREFIX_CACHE_RAM={raw!r}: expected a size like 512MiB or 2GiB, or off")
    return int(float(match.group(1)) * unit)


def trace_dir() -> Path | None:
    """``LOCALRUN_TRACE``: a folder where the daemon and its runners write timestamps through the
    serving path (``localrun.trace``; ``benchmarks/trace_report.py`` reads them). Default unset: off."""
    raw = _env("LOCALRUN_TRACE")
    return None if raw is None else Path(raw).expanduser()


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def log_level() -> str:
    """``LOCALRUN_LOG_LEVEL``: the daemon's and runners' log level: DEBUG, INFO (default), WARNING, ERROR.

    Prompts are logged only at DEBUG.
    """
    raw = _env("LOCALRUN_LOG_LEVEL")
    if raw is None:
        return "INFO"
    value = raw.upper()
    if value not in LOG_LEVELS:
        raise ConfigError(f"LOCALRUN_LOG_LEVEL={raw!r}: expected one of {', '.join(LOG_LEVELS)}")
    return value


def max_queue() -> int:
    """``LOCALRUN_MAX_QUEUE``: requests waiting for a slot before new ones get 503. Default 512."""
    return _positive_int("LOCALRUN_MAX_QUEUE", 512)


def pull_timeout() -> float:
    """``LOCALRUN_PULL_TIMEOUT``: the longest one download may take, as a duration. Default ``12h``.

    A pull that has not finished by then stops with an error and keeps its bytes, so the same pull
    resumes where it stopped. Stalled transfers stop much sooner (less than 16 KB in 30 s is a failed
    attempt); this bounds a hub that keeps sending just enough. ``0`` or a negative value is refused.
    """
    raw = _env("LOCALRUN_PULL_TIMEOUT")
    if raw is None:
        return 12 * 3600.0
    seconds = parse_duration(raw, "LOCALRUN_PULL_TIMEOUT")
    if seconds is None or seconds <= 0:
        raise ConfigError(f"LOCALRUN_PULL_TIMEOUT={raw!r}: must be a positive duration like '30m' or '6h'")
    return seconds


def origins() -> tuple[str, ...]:
    """``LOCALRUN_ORIGINS``: extra CORS origins (comma-separated), beside localhost ones. Default none."""
    raw = _env("LOCALRUN_ORIGINS")
    if raw is None:
        return ()
    items = tuple(o.strip() for o in raw.split(",") if o.strip())
    for origin in items:
        if origin != "*" and not re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://[^\s/]+$|^[^\s:/]+\*?$", origin):
            raise ConfigError(f"LOCALRUN_ORIGINS: {origin!r} is not an origin like 'https://app.example'")
    return items


def api_key() -> str | None:
    """``LOCALRUN_API_KEY``: when set, required as ``Authorization: Bearer KEY``. Default unset."""
    raw = _env("LOCALRUN_API_KEY")
    if raw is not None and any(c.isspace() for c in raw):
        raise ConfigError("LOCALRUN_API_KEY must not contain whitespace")
    return raw


def format_duration(seconds: float | None) -> str:
    """A duration as :func:`parse_duration` reads it back: ``5m``, ``1h30m``, ``250ms``, ``0``; ``-1`` is forever."""
    if seconds is None:
        return "-1"
    if seconds == 0:
        return "0"
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    whole = int(seconds)
    if whole != seconds:
        return f"{seconds:g}s"
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return "".join(f"{n}{unit}" for n, unit in ((hours, "h"), (minutes, "m"), (secs, "s")) if n) or "0"


@dataclass(frozen=True, slots=True)
class Settings:
    host: HostPort
    models_dir: Path
    keep_alive: float | None
    max_loaded_models: int
    num_parallel: int | None  # None: sized per model from memory
    kv_cache_type: str
    batch_invariant: bool
    max_queue: int
    origins: tuple[str, ...]
    api_key: str | None
    prefix_cache_dir: Path | None = None
    prefix_cache_ram: int = 0
    log_level: str = "INFO"
    upstreams: tuple[UpstreamSpec, ...] = ()
    rpc_servers: tuple[str, ...] = ()
    speculative: bool = True
    context_length: int | None = None  # None: each model's trained context, as memory allows
    fetch_images: bool = False  # download images requests name by URL (off: nothing leaves the machine)
    num_thread: int | None = None  # None: follow the free cores (engine/threads.py)
    repack: bool | None = None  # None: as the probe found (hardware/repack.py)
    backend_sampling: bool = False  # greedy sampled in llama.cpp's graph (engine/backend_sampler.py)

    def report(self) -> dict[str, str]:
        """Each setting as the variable a user would set for it, with its value written back in that form.

        The daemon serves this (``GET /api/status``) and the CLI computes its own the same way, so
        equal values compare equal (``300`` and ``5m`` are both ``5m``). The API key is never shown:
        only whether one is required.
        """
        return {
            "LOCALRUN_HOST": f"{self.host.host}:{self.host.port}",
            "LOCALRUN_MODELS": str(self.models_dir.expanduser().resolve()),
            "LOCALRUN_KEEP_ALIVE": format_duration(self.keep_alive),
            "LOCALRUN_MAX_LOADED_MODELS": str(self.max_loaded_models),
            "LOCALRUN_NUM_PARALLEL": "auto" if self.num_parallel is None else str(self.num_parallel),
            "LOCALRUN_KV_CACHE_TYPE": self.kv_cache_type,
            "LOCALRUN_BATCH_INVARIANT": "1" if self.batch_invariant else "0",
            "LOCALRUN_MAX_QUEUE": str(self.max_queue),
            "LOCALRUN_ORIGINS": ",".join(self.origins),
            "LOCALRUN_API_KEY": "(set)" if self.api_key else "",
            "LOCALRUN_LOG_LEVEL": self.log_level,
            "LOCALRUN_PREFIX_CACHE": "off" if self.prefix_cache_dir is None else str(self.prefix_cache_dir),
            "LOCALRUN_PREFIX_CACHE_RAM": f"{self.prefix_cache_ram >> 20}MiB" if self.prefix_cache_ram else "off",
            "LOCALRUN_UPSTREAMS": ",".join(f"{u.name}={u.display_url}" for u in self.upstreams),
            "LOCALRUN_RPC_SERVERS": ",".join(self.rpc_servers),
            "LOCALRUN_SPECULATIVE": "1" if self.speculative else "0",
            "LOCALRUN_CONTEXT_LENGTH": "auto" if self.context_length is None else str(self.context_length),
            "LOCALRUN_FETCH_IMAGES": "1" if self.fetch_images else "0",
            "LOCALRUN_NUM_THREAD": "auto" if self.num_thread is None else str(self.num_thread),
            "LOCALRUN_REPACK": "auto" if self.repack is None else "1" if self.repack else "0",
            "LOCALRUN_BACKEND_SAMPLING": "1" if self.backend_sampling else "0",
        }


# The variables Settings.report() names, and those read elsewhere on purpose (test seams of the runner,
# the profiling trace).
SETTING_VARIABLES = (
    "LOCALRUN_HOST", "LOCALRUN_MODELS", "LOCALRUN_KEEP_ALIVE", "LOCALRUN_MAX_LOADED_MODELS", "LOCALRUN_NUM_PARALLEL",
    "LOCALRUN_KV_CACHE_TYPE", "LOCALRUN_BATCH_INVARIANT", "LOCALRUN_MAX_QUEUE", "LOCALRUN_ORIGINS", "LOCALRUN_API_KEY",
    "LOCALRUN_LOG_LEVEL", "LOCALRUN_PREFIX_CACHE", "LOCALRUN_PREFIX_CACHE_RAM", "LOCALRUN_UPSTREAMS",
    "LOCALRUN_RPC_SERVERS", "LOCALRUN_SPECULATIVE", "LOCALRUN_CONTEXT_LENGTH", "LOCALRUN_FETCH_IMAGES",
    "LOCALRUN_NUM_THREAD", "LOCALRUN_REPACK", "LOCALRUN_BACKEND_SAMPLING",
)
_SEAMS = ("LOCALRUN_RUNNER_FACTORY", "LOCALRUN_RUNNER_DEBUG", "LOCALRUN_TRACE")


def known_variables() -> tuple[str, ...]:
    """Every ``LOCALRUN_*`` variable localrun reads."""
    return SETTING_VARIABLES + _SEAMS


def explicit_variables() -> tuple[str, ...]:
    """The settings variables set (non-empty) in this process's environment."""
    return tuple(name for name in SETTING_VARIABLES if _env(name) is not None)


def unknown_variables() -> list[tuple[str, str | None]]:
    """``LOCALRUN_*`` variables set here that localrun does not read (typos), each with the nearest known name."""
    import difflib

    known = known_variables()
    found = []
    for name in sorted(os.environ):
        if name.startswith("LOCALRUN_") and name not in known:
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.7)
            found.append((name, close[0] if close else None))
    return found


def load_settings() -> Settings:
    """Read and validate every setting; raises ConfigError naming the first bad variable."""
    return Settings(
        host=host(),
        models_dir=models_dir(),
        keep_alive=keep_alive(),
        max_loaded_models=max_loaded_models(),
        num_parallel=num_parallel(),
        kv_cache_type=kv_cache_type(),
        batch_invariant=batch_invariant(),
        max_queue=max_queue(),
        origins=origins(),
        api_key=api_key(),
        prefix_cache_dir=prefix_cache_dir(),
        prefix_cache_ram=prefix_cache_ram(),
        log_level=log_level(),
        upstreams=upstreams(),
        rpc_servers=rpc_servers(),
        speculative=speculative(),
        context_length=context_length(),
        fetch_images=fetch_images(),
        num_thread=num_thread(),
        repack=repack(),
        backend_sampling=backend_sampling(),
    )


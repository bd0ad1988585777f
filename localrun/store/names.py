"""Model names: ``[host/][namespace/]model[:tag]`` and ``hf.co/{user}/{repo}[:{quant}]``.

A :class:`ModelName` is validated on parse so that no name can reach outside the store: every
part starts with a letter, digit or ``_`` and holds only letters, digits, ``_``, ``.`` and ``-``
(so ``..``, ``/``, ``\\``, NUL, control characters and absolute paths are impossible), and each
part and the whole name have a length limit. ``str(name)`` is the short form a user types and
``localrun list`` shows (``gemma3:270m``, ``hf.co/Qwen/Qwen2.5-0.5B-Instruct-GGUF:Q4_K_M``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from ..errors import InvalidName

DEFAULT_HOST = "localrun"
DEFAULT_NAMESPACE = "library"
DEFAULT_TAG = "latest"
HF_HOST = "hf.co"
_HF_ALIASES = frozenset({"hf.co", "huggingface.co", "www.huggingface.co"})
# Hosts Ollama users type for the default registry: adopted as localrun's default.
_DEFAULT_ALIASES = frozenset({DEFAULT_HOST, "registry.ollama.ai", "ollama.com"})

MAX_PART_LEN = 128
MAX_NAME_LEN = 400
_PART_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*")
_HOST_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9.\-]*")


def _check_part(kind: str, value: str, text: str) -> str:
    if not value:
        raise InvalidName(f"invalid model name {text!r}: the {kind} is empty")
    if len(value) > MAX_PART_LEN:
        raise InvalidName(f"invalid model name {text!r}: the {kind} is longer than {MAX_PART_LEN} characters")
    pattern = _HOST_RE if kind == "host" else _PART_RE
    if not pattern.fullmatch(value) or ".." in value:
        raise InvalidName(
            f"invalid model name {text!r}: the {kind} {value!r} may hold only letters, digits, "
            "'_', '.' and '-', and must start with a letter, digit or '_'"
        )
    return value


@dataclass(frozen=True, slots=True, order=True)
class ModelName:
    """A validated model name. Parts are safe to use as path components."""

    host: str
    namespace: str
    model: str
    tag: str

    @classmethod
    def parse(cls, text: str) -> ModelName:
        """Parse a name a user typed; raises InvalidName saying what is wrong."""
        if not isinstance(text, str):
            raise InvalidName(f"invalid model name {text!r}: expected text")
        raw = text.strip()
        shown = raw if len(raw) <= 80 else raw[:77] + "..."
        if not raw:
            raise InvalidName("invalid model name '': a name is required, e.g. 'gemma3:270m'")
        if len(raw) > MAX_NAME_LEN:
            raise InvalidName(f"invalid model name {shown!r}: longer than {MAX_NAME_LEN} characters")
        if any(ord(c) < 32 or ord(c) == 127 for c in raw):
            raise InvalidName(f"invalid model name {shown!r}: contains a control character")
        if raw.startswith(("/", "\\")) or "\\" in raw or (re.match(r"^[A-Za-z]:", raw) and "/" in raw[:3]):
            raise InvalidName(f"invalid model name {shown!r}: a name is not a path")
        for prefix in ("https://", "http://"):
            if raw.lower().startswith(prefix):
                raw = raw[len(prefix):]
        path, tag = raw, DEFAULT_TAG
        slash = raw.rfind("/")
        colon = raw.rfind(":")
        if colon > slash:
            path, tag = raw[:colon], raw[colon + 1:]
            if not tag:
                raise InvalidName(f"invalid model name {shown!r}: empty tag after ':'")
        parts = path.split("/")
        if len(parts) > 3:
            raise InvalidName(f"invalid model name {shown!r}: expected [host/][namespace/]model[:tag]")
        if len(parts) == 3:
            host, namespace, model = parts
        elif len(parts) == 2:
            host, (namespace, model) = DEFAULT_HOST, parts
        else:
            host, namespace, model = DEFAULT_HOST, DEFAULT_NAMESPACE, parts[0]
        host = _check_part("host", host, shown).lower()
        if host in _HF_ALIASES:
            host = HF_HOST
        elif host in _DEFAULT_ALIASES:
            host = DEFAULT_HOST
        return cls(
            host=host,
            namespace=_check_part("namespace", namespace, shown),
            model=_check_part("model", model, shown),
            tag=_check_part("tag", tag, shown),
        )

    @property
    def is_hf(self) -> bool:
        """True for ``hf.co/{user}/{repo}[:{quant}]`` names."""
        return self.host == HF_HOST

    @property
    def hf_repo(self) -> str:
        """``user/repo`` of an hf.co name."""
        return f"{self.namespace}/{self.model}"

    @property
    def quant(self) -> str | None:
        """The quant an hf.co name asks for; None means the default (Q4_K_M, else the only GGUF)."""
        return None if self.tag == DEFAULT_TAG else self.tag

    @property
    def full(self) -> str:
        """``host/namespace/model:tag``: unambiguous, used in logs and as a key."""
        return f"{self.host}/{self.namespace}/{self.model}:{self.tag}"

    @property
    def relpath(self) -> PurePosixPath:
        """The manifest's path relative to ``manifests/``: ``host/namespace/model/tag``."""
        return PurePosixPath(self.host, self.namespace, self.model, self.tag)

    def __str__(self) -> str:
        if self.host != DEFAULT_HOST:
            return self.full
        if self.namespace != DEFAULT_NAMESPACE:
            return f"{self.namespace}/{self.model}:{self.tag}"
        return f"{self.model}:{self.tag}"

    def casefold_key(self) -> str:
        """Key for case-insensitive lookup (``Gemma3:270M`` finds ``gemma3:270m``)."""
        return self.full.casefold()


def near_names(typed: str, known: list[str], limit: int = 3) -> list[str]:
    """Names in ``known`` close to what the user ``typed`` (a misspelling), closest first.

    Compares both the whole name and the model part (so ``lama3.2`` finds ``llama3.2:1b``).
    """
    import difflib

    text = typed.strip().lower()
    text_model, _, text_tag = text.partition(":")
    scored: dict[str, float] = {}
    for name in known:
        lowered = name.lower()
        model = lowered.partition(":")[0]
        whole = difflib.SequenceMatcher(None, text, lowered).ratio()
        untagged = text_tag in ("", DEFAULT_TAG)
        part = difflib.SequenceMatcher(None, text_model, model).ratio() if untagged else 0.0
        score = max(whole, part)
        if score >= 0.75 and lowered != text:
            scored[name] = max(score, scored.get(name, 0.0))
    return sorted(scored, key=lambda n: (-scored[n], n))[:limit]

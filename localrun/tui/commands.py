"""Ollama's interactive slash commands: parsing, typed parameter values, /show text and /save Modelfiles.

Headless (no textual): :func:`parse` turns one input line starting with ``/`` into a command
dataclass, or raises :class:`~localrun.errors.InvalidRequest` whose message is what to show the
user (usage included). The chat screen executes the commands; this module only decides what
they mean.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..chat.think import Think, as_level
from ..errors import InvalidRequest, OptionError
from ..jsontypes import JSONObject, JSONValue, as_object
from ..parameters import ParameterValue, kind_of, parse_value
from .conversations import ChatMessage

# What /set parameter offers (types and rules: localrun.parameters, shared with the Modelfile parser).
SESSION_PARAMETERS = ("seed", "num_predict", "top_k", "top_p", "min_p", "typical_p", "num_ctx", "num_batch",
                      "num_gpu", "num_thread", "num_keep", "temperature", "repeat_penalty", "repeat_last_n",
                      "presence_penalty", "frequency_penalty", "cache_reuse", "stop")

SHOW_TOPICS = ("info", "license", "modelfile", "parameters", "system", "template")

HELP = """\
Available commands:
  /set            Session settings: /set parameter, system, format, think, verbose (/? set)
  /show TOPIC     Model details: info, modelfile, parameters, template, system, license
  /load MODEL     Switch to another model (the conversation continues; /clear starts over)
  /save NAME      Save this session as a new model (FROM + SYSTEM + PARAMETERs + MESSAGEs)
  /image PATH     Attach an image to your next message (or paste or drop its path into the message)
  /clear          Clear the conversation (the current one stays in the saved list)
  /bye            Exit
  /?, /help       Help for a command (/? set, /? show, /? shortcuts)

Keys: Enter sends · Ctrl+J inserts a newline (Shift+Enter where the terminal reports it)
      Esc or Ctrl+C stops a reply, keeping what arrived · Ctrl+N new chat · Ctrl+Q quits
      F2 models · F3 system prompt and parameters · F4 saved chats · F5 dashboard"""

HELP_SET = """\
Available /set commands:
  /set parameter NAME VALUE   Set a parameter (e.g. /set parameter temperature 0.2)
  /set system TEXT            Set the system message
  /set format json            Ask for JSON output;  /set noformat to stop
  /set verbose                Show timings after each reply;  /set quiet to show only the short line
  /set history | nohistory    Keep (default) or forget earlier turns when sending
  /set think [high|medium|low]  Let a thinking model reason first;  /set nothink to answer at once
  /set hidethinking           Hide a thinking model's reasoning;  /set nohidethinking to show it

Parameters: """ + ", ".join(sorted(SESSION_PARAMETERS))

HELP_SHOW = """\
Available /show commands:
  /show info        Details about this model
  /show modelfile   The Modelfile of this model
  /show parameters  Parameters of this model and of this session
  /show system      The system message
  /show template    The prompt template
  /show license     The license"""

HELP_SHORTCUTS = """\
Keyboard shortcuts:
  Enter        send the message
  Ctrl+J       insert a newline (Shift+Enter / Alt+Enter where the terminal reports them)
  Up / Down    previous / next message you sent, when the cursor is on the first / last line
  Esc, Ctrl+C  stop the reply that is streaming (keeps what arrived)
  F2           pick a model          F3  system prompt and parameters
  F4           saved conversations   F5  dashboard (loaded models, tokens/s)
  Ctrl+N       new conversation      Ctrl+Q  quit"""


@dataclass(frozen=True, slots=True)
class SetParameter:
    name: str
    value: ParameterValue


@dataclass(frozen=True, slots=True)
class ListParameters:
    pass


@dataclass(frozen=True, slots=True)
class SetSystem:
    text: str | None


@dataclass(frozen=True, slots=True)
class SetFormat:
    format: str | None


@dataclass(frozen=True, slots=True)
class SetVerbose:
    verbose: bool


@dataclass(frozen=True, slots=True)
class SetHistory:
    keep: bool


@dataclass(frozen=True, slots=True)
class SetThink:
    think: Think


@dataclass(frozen=True, slots=True)
class SetHideThinking:
    hide: bool


@dataclass(frozen=True, slots=True)
class Show:
    topic: str


@dataclass(frozen=True, slots=True)
class Load:
    model: str


@dataclass(frozen=True, slots=True)
class Save:
    name: str


@dataclass(frozen=True, slots=True)
class Clear:
    pass


@dataclass(frozen=True, slots=True)
class Bye:
    pass


@dataclass(frozen=True, slots=True)
class Help:
    text: str


@dataclass(frozen=True, slots=True)
class AttachImage:
    path: str  # an image file for the next message (tui/attachments.py)


Command = (SetParameter | ListParameters | SetSystem | SetFormat | SetVerbose | SetHistory | SetThink
           | SetHideThinking | Show | Load | Save | Clear | Bye | Help | AttachImage)


def think_setting(raw: str) -> Think:
    """``--think=VALUE`` / ``/set think VALUE`` as the request's ``think``: true (also empty), false, or a level."""
    value = raw.strip().lower()
    if value in ("", "true", "on", "yes"):
        return True
    if value in ("false", "off", "no"):
        return False
    level = as_level(value)
    if level is None:
        raise InvalidRequest(f"think must be true, false, high, medium or low, not {raw!r}")
    return level


def is_command(line: str) -> bool:
    """True for ``/word...`` input; a path like ``/etc/hosts is...`` is not sent as a command either."""
    return line.startswith("/") and not line.startswith('"""')


def parse(line: str) -> Command:
    """Parse one slash command; raises InvalidRequest with a message meant for the user."""
    text = line.strip()
    head, _, rest = text.partition(" ")
    rest = rest.strip()
    word = head.lower()
    if word in ("/?", "/help"):
        topic = rest.lower()
        if topic in ("set", "/set"):
            return Help(HELP_SET)
        if topic in ("show", "/show"):
            return Help(HELP_SHOW)
        if topic in ("shortcut", "shortcuts", "keys"):
            return Help(HELP_SHORTCUTS)
        return Help(HELP)
    if word in ("/bye", "/exit", "/quit"):
        return Bye()
    if word == "/clear":
        return Clear()
    if word == "/load":
        if not rest or " " in rest:
            raise InvalidRequest("Usage:\n  /load MODEL")
        return Load(rest)
    if word == "/save":
        if not rest or " " in rest:
            raise InvalidRequest("Usage:\n  /save MODEL")
        return Save(rest)
    if word == "/show":
        topic = rest.lower()
        if topic not in SHOW_TOPICS:
            raise InvalidRequest(HELP_SHOW)
        return Show(topic)
    if word == "/set":
        return _parse_set(rest)
    if word == "/image":
        if not rest:
            raise InvalidRequest("Usage:\n  /image PATH   (or paste or drop the file's path into your message)")
        quoted = len(rest) > 1 and rest[0] == rest[-1] and rest[0] in "\"'"
        return AttachImage(rest[1:-1] if quoted else rest)
    raise InvalidRequest(f"Unknown command '{head}'. Type /? for help")


def _parse_set(rest: str) -> Command:
    sub, _, value = rest.partition(" ")
    sub, value = sub.lower(), value.strip()
    if sub == "parameter":
        if not value:
            return ListParameters()
        name, _, raw = value.partition(" ")
        if not raw.strip():
            raise InvalidRequest("Usage:\n  /set parameter NAME VALUE")
        return SetParameter(name.lower(), parse_parameter(name, raw.strip()))
    if sub == "system":
        return SetSystem(unquote(value) or None)
    if sub == "format":
        if value.lower() != "json":
            raise InvalidRequest("Usage:\n  /set format json   (or /set noformat)")
        return SetFormat("json")
    if sub == "noformat":
        return SetFormat(None)
    if sub in ("verbose", "quiet"):
        return SetVerbose(sub == "verbose")
    if sub in ("history", "nohistory"):
        return SetHistory(sub == "history")
    if sub == "think":
        try:
            return SetThink(think_setting(value))
        except InvalidRequest:
            raise InvalidRequest("Usage:\n  /set think [high|medium|low]   (or /set nothink)") from None
    if sub == "nothink":
        return SetThink(False)
    if sub in ("hidethinking", "nohidethinking"):
        return SetHideThinking(sub == "hidethinking")
    if sub in ("wordwrap", "nowordwrap"):
        raise InvalidRequest("The chat view always wraps words; `localrun run MODEL PROMPT` never does.")
    raise InvalidRequest(HELP_SET)


def unquote(text: str) -> str:
    """Strip one pair of surrounding ``\"\"\"`` or ``"`` quotes, as Ollama does for /set system."""
    for quote in ('"""', '"'):
        if len(text) >= 2 * len(quote) and text.startswith(quote) and text.endswith(quote):
            return text[len(quote):-len(quote)]
    return text


def parse_parameter(name: str, raw: str) -> ParameterValue:
    """The typed value of a parameter (the rules of :mod:`localrun.parameters`), or InvalidRequest
    saying what was expected. ``stop`` takes several space-separated, optionally quoted strings."""
    key = name.lower()
    if key not in SESSION_PARAMETERS:
        raise InvalidRequest(f"Unknown parameter '{name}'. Known: {', '.join(sorted(SESSION_PARAMETERS))}")
    if kind_of(key) is list:
        return [unquote(part) for part in raw.split()] if raw.strip() else []
    try:
        return parse_value(key, raw)
    except OptionError as exc:
        raise InvalidRequest(f"Couldn't set parameter '{key}': {exc}") from None


def _quoted(text: str) -> str:
    """A Modelfile value: a triple-quoted block, or a quoted string when the text holds triple quotes."""
    if '"""' not in text and not text.endswith('"'):
        return f'"""{text}"""'
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
    return f'"{escaped}"'


def format_parameter_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value) if (not value or any(c.isspace() or c == '"' for c in value)) else value
    return str(value)


def save_modelfile(model: str, system: str | None, options: Mapping[str, object],
                   messages: Sequence[ChatMessage]) -> str:
    """The Modelfile ``/save`` creates: FROM the current model, SYSTEM, PARAMETERs and MESSAGEs."""
    lines = [f"FROM {model}"]
    if system:
        lines.append(f"SYSTEM {_quoted(system)}")
    for name in sorted(options):
        value = options[name]
        for item in value if isinstance(value, list) else [value]:
            lines.append(f"PARAMETER {name} {format_parameter_value(item)}")
    for message in messages:
        role, content = message.get("role"), str(message.get("content", ""))
        if role in ("user", "assistant", "system", "tool"):
            lines.append(f"MESSAGE {role} {_quoted(content)}")
    return "\n".join(lines) + "\n"


def show_text(topic: str, info: JSONObject, session_system: str | None,
              session_options: JSONObject) -> str:
    """What ``/show TOPIC`` prints, from the daemon's /api/show answer and this session's settings."""
    if topic == "info":
        return info_text(info)
    if topic == "modelfile":
        return str(info.get("modelfile") or "(no Modelfile)")
    if topic == "template":
        return str(info.get("template") or "No prompt template was specified for this model.")
    if topic == "license":
        return str(info.get("license") or "No license was specified for this model.")
    if topic == "system":
        text = session_system or info.get("system")
        return str(text) if text else "No system message was specified for this model."
    lines = []
    model_params = str(info.get("parameters") or "").strip()
    if model_params:
        lines += ["Model defined parameters:", *("  " + line for line in model_params.splitlines())]
    else:
        lines.append("No model parameters were specified for this model.")
    if session_options:
        lines.append("User defined parameters:")
        lines += [f"  {k:<16}{format_parameter_value(v)}" for k, v in sorted(session_options.items())]
    return "\n".join(lines)


def info_text(info: JSONObject) -> str:
    details = as_object(info.get("details"))
    model_info = as_object(info.get("model_info"))
    arch = str(model_info.get("general.architecture") or details.get("family") or "")

    def arch_key(suffix: str) -> JSONValue:
        return model_info.get(f"{arch}.{suffix}") if arch else None

    rows = [
        ("architecture", arch),
        ("parameters", details.get("parameter_size") or model_info.get("general.parameter_count") or ""),
        ("context length", arch_key("context_length") or ""),
        ("embedding length", arch_key("embedding_length") or ""),
        ("quantization", details.get("quantization_level") or ""),
    ]
    lines = ["Model"] + [f"  {k:<20}{v}" for k, v in rows if v not in ("", None)]
    capabilities = info.get("capabilities")
    if isinstance(capabilities, list) and capabilities:
        lines += ["", "Capabilities"] + [f"  {c}" for c in capabilities]
    params = str(info.get("parameters") or "").strip()
    if params:
        lines += ["", "Parameters"] + ["  " + line for line in params.splitlines()]
    system = info.get("system")
    if system:
        lines += ["", "System", "  " + str(system).strip().splitlines()[0]]
    license_text = info.get("license")
    if license_text:
        first = str(license_text[0] if isinstance(license_text, list) else license_text).strip().splitlines()
        if first:
            lines += ["", "License", "  " + first[0]]
    return "\n".join(lines)

"""Schema grammars must not let a JSON string hold raw control characters (JSON forbids them)."""

from __future__ import annotations

from localrun.engine.grammar import schema_to_gbnf


def test_schema_string_characters_exclude_control_characters() -> None:
    gbnf = schema_to_gbnf({"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}}})
    char_rules = [line for line in gbnf.splitlines() if line.startswith("char ::=")]
    assert char_rules and all(r"\x00-\x1F" in rule for rule in char_rules)

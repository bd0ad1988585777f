"""What a Textual widget draws, as text lines: tests read the screen as the user sees it."""

from __future__ import annotations

from textual.geometry import Region
from textual.widget import Widget

_TEXT_BLOCKS = ("MarkdownParagraph", "Static")


def screen_lines(widget: Widget) -> list[str]:
    """The non-blank lines ``widget`` and its text blocks render (paragraphs, statics), top to bottom."""
    lines: list[str] = []
    for block in [widget, *widget.query("*")]:
        if type(block).__name__ in _TEXT_BLOCKS and block.display:
            size = block.size
            lines += [strip.text.rstrip() for strip in block.render_lines(Region(0, 0, size.width, size.height))]
    return [line for line in lines if line.strip()]

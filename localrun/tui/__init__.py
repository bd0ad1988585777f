"""The terminal UI (Textual): the chat of ``localrun run`` and the dashboard of ``localrun top``.

Only :mod:`localrun.tui.app`, :mod:`~localrun.tui.shell` and the screen modules import textual;
``backend``, ``commands``, ``session``, ``stats`` and ``model_ops`` are headless, so the CLI can use
them without loading it.
"""

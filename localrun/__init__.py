"""localrun: a local-first model runner (daemon, OpenAI/Ollama APIs, terminal UI)."""

__version__ = "0.1.0"

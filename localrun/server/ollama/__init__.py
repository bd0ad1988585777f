"""Ollama's native API: its generation routes, model management, tokenizer routes and reply shapes."""

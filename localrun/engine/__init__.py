"""The engine: one loaded model served by continuous batching on llama-cpp-python's low-level API.

Modules (only this package imports llama_cpp; ``types``, ``radix`` and ``detok``
are pure Python and safe to import from the daemon):

- ``engine``: :class:`Engine` (load, submit, embed, tokenize, stats, close) and the engine thread
- ``batcher``: the step loop (admit, build one batch, decode, sample, stream, retire)
- ``kvcache`` / ``radix``: sequence ids of the unified KV cache and the shared prefix tree
- ``sampling`` / ``grammar``: native sampler chains, option checks, JSON Schema to GBNF
- ``detok``: incremental UTF-8 detokenising and stop strings
- ``embedding``: batched embeddings on a second context
- ``vision``: a vision model's projector (libmtmd): images as token spans, encoded beside the batch
- ``regex_bounds``: how much grammar a JSON-schema ``pattern`` may become
- ``native``: model/context/vocab/batch wrappers; ``types``: the public contract

Chat templates are not the engine's: it generates from token ids or text, and the daemon renders
conversations with :mod:`localrun.chat`. Nothing is imported here, so ``import localrun.engine.types``
never loads native code.
"""

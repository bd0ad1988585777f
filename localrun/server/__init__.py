"""The daemon's HTTP face (aiohttp): every API is an adapter on one native chat call.

A request enters through the middlewares, its API's routes turn it into a
:class:`~localrun.server.native_call.NativeCall`, and the shared path runs it: ``service``
resolves and holds the model, ``chatturn`` renders the conversation (``rendering``: templates in
bounded workers) and ``chat`` streams the engine's events back, which the API's own stream module
shapes into its wire format.

One subpackage per API family, each with its routes, its conversions and its stream shapes:

- ``ollama/``: Ollama's native API (``routes``: /api/chat, /api/generate, /api/embed; ``models``:
  tags, show, pull, create, copy, delete, blobs; ``tokens``: tokenize/detokenize; ``shapes``)
- ``openai/``: /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/models (``routes``,
  ``convert``)
- ``anthropic/``: /v1/messages and count_tokens (``routes``, ``convert``, ``stream``)
- ``responses/``: OpenAI's Responses API, /v1/responses (``routes``, ``convert``, ``stream``)

Shared by all of them: ``app`` (the application and its start-up), ``service``, ``native_call``,
``options``, ``chatturn``, ``chat``, ``output``, ``rendering``, ``remote`` (upstream pools);
HTTP plumbing: ``http``, ``keys``, ``middleware``, ``metrics``, ``executors``, ``lifecycle``;
routes about the daemon rather than a model: ``status`` (/, /health, /api/version, /api/ps,
/metrics) and ``control`` (/api/status, /api/shutdown).
"""

"""Upstreams: other inference servers served behind this daemon's endpoint as ``NAME/model``.

An upstream is any server speaking OpenAI's ``/v1`` (vLLM, SGLang, TGI, llama.cpp's server, LM
Studio, another localrun) or Ollama's ``/api``. The local user adds it with ``localrun upstream
add NAME URL`` (persisted in the config dir) or ``LOCALRUN_UPSTREAMS``; never an API request.
Several URLs under one NAME form a pool.

    spec.py       UpstreamSpec (name, url, api, key variable, models) and its validation (pure)
    registry.py   the upstreams file in the config dir: load, add, remove (atomic, mode 0600)
    requests.py   ChatRequest / CompletionRequest / EmbedRequest: what an upstream is asked (typed)
    openai_api.py requests as ``/v1`` bodies, ``/v1`` SSE and JSON as events (pure)
    ollama_api.py the same for ``/api`` (pure)
    transport.py  httpx with explicit timeouts, bounded lines and bodies, redacted errors
    pool.py       members' state and the choice: healthy, affinity, least-loaded, cool-down (pure)
    router.py     Upstreams: routing ``NAME/model``, the retry rule (failover until the handover), checks
    health.py     HealthChecks: when members are checked (one at a time each; faster while cooling down)
    reply.py      UpstreamReply (a reply handed over from one member) and Retry (try the next member)

Nothing here imports aiohttp: the server's seam (``localrun/server/remote.py``) drives it.
Replies are the chat events a local model's reply is parsed into (``ContentDelta``, ``ThinkingDelta``,
``ToolCall`` of ``localrun.chat.events``) ended by an engine ``DoneEvent``, so every API the server speaks
writes an upstream's reply the way it writes a local model's.
"""

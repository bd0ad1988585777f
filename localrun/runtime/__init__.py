"""Model residency: which models are loaded, in which runner process, and for how long.

- :mod:`.protocol`  length-prefixed JSON frames between the daemon and a runner process
- :mod:`.runner`    ``python -m localrun.runtime.runner``: hosts one Engine in its own process
- :mod:`.process`   the daemon side of a runner process (:class:`RunnerProcess`)
- :mod:`.memory`    GGUF geometry, memory estimates and layer placement (the fit check)
- :mod:`.resident`  LoadSpec, Backend, ResidentModel, Clock: the scheduler's vocabulary and seams
- :mod:`.scheduler` the asyncio scheduler: load on first use, keep-alive, eviction, queue bound
- :mod:`.bounded` / :mod:`.bounded_child`  child processes with CPU, memory and time limits for work
  whose cost strangers control (chat templates)

Nothing here imports llama_cpp: native code only runs inside runner processes.
"""

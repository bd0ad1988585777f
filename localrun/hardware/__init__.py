"""What the machine has and where a model goes on it.

Modules, each with one job::

    devices    the compute devices ggml reports (probed in a child process), one ``Device`` type
    hostgpu    GPUs on the machine whatever llama.cpp was built with, and the rebuild advice
    sysinfo    what ``localrun info`` reports (versions, build, devices, CPU, memory, store)
    memory     the fit check: bytes a model needs (from the store's GGUF geometry reader)
    placement  where its layers go (llama.cpp's offload rules), one ``Placement`` record

Arrows: this package reads ``localrun.store`` (GGUF geometry), ``localrun.engine.types`` and
``localrun.errors``/``config``; ``runtime`` and ``server`` import it; ``engine`` does not.
"""

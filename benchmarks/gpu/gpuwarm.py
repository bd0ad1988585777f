"""pytest plugin for the engine tests on a lent GPU machine (``-p gpuwarm``, with ``.gpu`` on the path).

With the hand-made CUDA build of llama.cpp, a model load crashed inside ``llama_model::print_info``
when numpy (which pytest's plugins import) was loaded before llama.cpp's libraries. Loading them
here, as a plugin pytest imports first, and asking for the GPU backend once, avoids that; the engine
itself imports llama_cpp first anyway.
"""

import llama_cpp

print("gpuwarm: llama_supports_gpu_offload() =", llama_cpp.llama_supports_gpu_offload())

"""Names vulture reports as unused that are used: read by `vulture` through [tool.vulture] in pyproject.toml.

Each group says who uses the names. A name belongs here only when its use is invisible to static
analysis; code that is merely unused is deleted instead.
"""

# ruff: noqa: B018 (bare expressions are the whitelist's format: vulture counts each name as used)
_ = object()

# Fields of records serialized whole (dataclasses.asdict / JSON reports / the runner protocol /
# /api/show and `localrun info`): read by the other side, never by attribute name here.
_.usage_requested, _.mean, _.p99, _.warmup_requests, _.warmup_failures, _.output_tokens_in_window
_.requests_per_s, _.mean_prompt_tokens, _.token_sources  # bench JSON results
_.created_at  # conversations file
_.slots_total, _.slots_active, _.prefix_cache_hit_tokens  # EngineStats -> /metrics
_.kv_cache_resets  # EngineStats across the runner protocol (read by the seed tests through stats())
_.n_params, _.bos_text, _.eos_text, _.size_bytes, _.buffer_bytes  # ModelInfo -> /api/show, /api/ps
_.offload_layers, _.gpu_buffer_bytes, _.cpu_buffer_bytes  # ModelInfo -> hardware.memory.reconcile (as a mapping)
_.total_bytes  # Device / HostGpu -> `localrun info`
_.localrun, _.registered_backends, _.cores_physical, _.cores_logical, _.available_bytes, _.workarounds
_.setting, _.applies, _.used_bytes, _.disk_free_bytes, _.disk_total_bytes  # sysinfo.Info keys (TypedDict, by string)
_.tensor_count, _.license  # GGUF header, Modelfile LICENSE -> /api/show
_.prefix_len  # radix MatchResult field, part of its typed result
_.enqueued  # scheduler _Pending, built positionally (kept for queue-wait reporting)

# Fields of llama.cpp's ctypes structs: assigning them configures the native library.
_.use_extra_bufts, _.n_gpu_layers, _.n_ubatch, _.n_threads_batch, _.kv_unified, _.flash_attn_type, _.load_mode
_.type_k, _.type_v, _.no_perf, _.pooling_type, _.embd, _.n_outputs_max_per_seq

# Read by name through getattr-style indirection inside their own module.
_._utf8_cache, _._eog_ids, _._specials  # native.Vocab._scan_once(attribute_name, ...)
_._reader_task  # holds a reference so the reader task is not garbage-collected

# Hooks called by a framework.
_.unsafe_undefined  # jinja2 sandbox
_.intercepted_binops, _.code_generator_class, _.template_class  # jinja2 Environment class attributes
_.counted, _.checked  # template_limits: called from compiled templates via EnvironmentAttribute
_.control  # textual Message.control

# Entry points reached by name: the device probe's child process runs `_print_report` from a -c string.
_._print_report

# Planner outputs shown to users or tests and meant for llama.cpp's tensor_split with several GPUs.
_.layers_per_device, _.tensor_split

# Test and bench seams (the tests and benchmarks/ scripts are outside vulture's paths).
_.resets, _.protected_size, _.t_submit, _.debug_abort, _.requested, _.parse_reply, _.curated_modelfile
_.registered  # engine.rpc: what this process registered, read by its tests
_.restored_tokens  # engine.host_cache: tokens brought back from host RAM, read by the host-tier tests
_.skipped_tokens  # engine.host_cache: short segments left for the step to recompute, read by its tests
_.check_cells  # engine.kvcache: asserts llama.cpp still holds every cached path, called by the engine tests
_.print_timings  # engine.vision: a libmtmd context parameter (ctypes structure field), read by the C side
_.image_names  # tui.conversations: a ChatMessage key (TypedDict), read and written by its string name
_.reused_tokens  # engine.tokencache: tokens taken from remembered texts, read by its tests
_.settle  # engine.tokencache: waits for the texts handed to the background thread, used by its tests
_.shifted_tokens  # engine.kvcache: prompt tokens reused with their positions shifted, read by its tests

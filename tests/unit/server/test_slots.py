"""Default sequence slots: sized from free memory and the model's KV bytes per token."""

from __future__ import annotations

from localrun.engine.types import LoadOptions
from localrun.hardware.devices import DeviceKind
from localrun.hardware.memory import MAX_AUTO_SLOTS, Device, GiB, MiB, ModelGeometry, default_slots, kv_bytes_per_token
from localrun.server.options import merge_options


def _model(n_layer: int, n_head_kv: int, head_dim: int, size: int) -> ModelGeometry:
    return ModelGeometry(architecture="llama", file_size=size, n_layer=n_layer, n_embd=n_head_kv * head_dim * 4,
                         n_ff=4096, n_head=16, n_head_kv=n_head_kv, head_dim_k=head_dim, head_dim_v=head_dim,
                         n_vocab=32000, n_ctx_train=32768)


GEMMA_270M = _model(18, 1, 256, 253 * MiB)    # 18 KB of KV per token
LLAMA_8B = _model(32, 8, 128, 4900 * MiB)     # 128 KB of KV per token


def test_kv_bytes_per_token_counts_keys_and_values_in_every_layer() -> None:
    assert kv_bytes_per_token(GEMMA_270M) == 18 * 1 * 512 * 2
    assert kv_bytes_per_token(LLAMA_8B) == 32 * 8 * 256 * 2


def test_a_small_model_on_a_roomy_machine_gets_the_most_slots() -> None:
    assert default_slots(GEMMA_270M, LoadOptions(num_ctx=4096), 20 * GiB, []) == MAX_AUTO_SLOTS


def test_a_big_model_gets_what_half_of_the_memory_left_holds() -> None:
    # 8 GiB free - 4.9 GiB of weights - compute: ~1.5 GiB for slots of 512 MiB each
    slots = default_slots(LLAMA_8B, LoadOptions(num_ctx=4096), 8 * GiB, [])
    assert 1 < slots < MAX_AUTO_SLOTS
    assert default_slots(LLAMA_8B, LoadOptions(num_ctx=16384), 8 * GiB, []) < slots  # longer contexts, fewer


def test_never_less_than_one_slot_and_gpu_memory_counts() -> None:
    assert default_slots(LLAMA_8B, LoadOptions(num_ctx=4096), 1 * GiB, []) == 1
    gpu = Device("GPU0", "", DeviceKind.GPU, 24 * GiB, 20 * GiB, "CUDA")
    assert default_slots(LLAMA_8B, LoadOptions(num_ctx=4096), 1 * GiB, [gpu]) == MAX_AUTO_SLOTS


def test_batch_invariance_is_a_load_option_over_the_daemon_default() -> None:
    base = LoadOptions(batch_invariant=False, kv_cache_type="auto")
    load, _, _ = merge_options({}, {}, num_parallel=4, base=base)
    assert not load.batch_invariant and load.num_parallel == 4
    load, _, _ = merge_options({"batch_invariant": True}, {}, num_parallel=4, base=base)  # Modelfile
    assert load.batch_invariant
    load, _, _ = merge_options({}, {"batch_invariant": True}, num_parallel=4, base=base)  # request options
    assert load.batch_invariant


def test_speculative_decoding_is_the_daemons_setting_and_no_request_changes_it() -> None:
    """LOCALRUN_SPECULATIVE reaches every load; a request cannot ask for a reload over it."""
    for daemon in (True, False):
        base = LoadOptions(speculative=daemon)
        load, _, _ = merge_options({"speculative": not daemon}, {"speculative": not daemon}, num_parallel=4,
                                   base=base)
        assert load.speculative is daemon


def test_only_a_prompt_that_may_overflow_needs_num_keep() -> None:
    from localrun.server.service import might_overflow

    assert not might_overflow("hello " * 100, 4096)  # 600 bytes: at most ~600 tokens
    assert might_overflow("hello " * 1000, 4096)
    assert might_overflow("é" * 2100, 4096)  # 4,200 bytes: a tokenizer might make 4,200 tokens of them

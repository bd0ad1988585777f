"""The context a model loads with: per-request maximum, KV pool and slots, from free memory."""

from __future__ import annotations

import logging

import pytest

from localrun.engine.types import LoadOptions
from localrun.errors import OptionError
from localrun.hardware.devices import DeviceKind
from localrun.hardware.memory import (
    MAX_AUTO_SLOTS,
    SLOT_CTX,
    Device,
    GiB,
    MiB,
    ModelGeometry,
    estimate,
    kv_bytes_per_token,
    plan_context,
)
from localrun.server.options import merge_options


def _model(n_layer: int, n_head_kv: int, head_dim: int, size: int, n_ctx_train: int = 32768) -> ModelGeometry:
    return ModelGeometry(architecture="llama", file_size=size, n_layer=n_layer, n_embd=n_head_kv * head_dim * 4,
                         n_ff=4096, n_head=16, n_head_kv=n_head_kv, head_dim_k=head_dim, head_dim_v=head_dim,
                         n_vocab=32000, n_ctx_train=n_ctx_train)


GEMMA_270M = _model(18, 1, 256, 253 * MiB)    # 18 KB of KV per token
LLAMA_8B = _model(32, 8, 128, 4900 * MiB)     # 128 KB of KV per token
LONG_8B = _model(32, 8, 128, 4900 * MiB, n_ctx_train=131072)


def test_kv_bytes_per_token_counts_keys_and_values_in_every_layer() -> None:
    assert kv_bytes_per_token(GEMMA_270M) == 18 * 1 * 512 * 2
    assert kv_bytes_per_token(LLAMA_8B) == 32 * 8 * 256 * 2


def test_a_small_model_on_a_roomy_machine_gets_its_trained_context_and_every_slot() -> None:
    plan = plan_context(GEMMA_270M, LoadOptions(), 20 * GiB, [], num_ctx=None, num_parallel=None)
    assert plan.num_ctx == 32768  # no fixed 4,096: an agent's 19k-token first turn fits
    assert plan.num_parallel == MAX_AUTO_SLOTS
    # the pool holds a whole request at the maximum, or every slot at a chat's share, whichever is more
    assert plan.context_pool == max(32768, MAX_AUTO_SLOTS * SLOT_CTX)


def test_a_long_trained_context_is_capped_by_what_half_the_free_memory_holds() -> None:
    plan = plan_context(LONG_8B, LoadOptions(), 16 * GiB, [], num_ctx=None, num_parallel=None)
    assert plan.num_ctx == plan.context_pool < 131072
    base = estimate(LONG_8B, LoadOptions(num_parallel=1, context_pool=512))
    kv = plan.context_pool * kv_bytes_per_token(LONG_8B)
    assert kv <= (16 * GiB - base.weights - base.compute) * 0.5  # what the daemon may give the pool
    assert estimate(LONG_8B, LoadOptions(context_pool=plan.context_pool)).total < 16 * GiB


def test_never_less_than_one_slot_and_gpu_memory_counts() -> None:
    small = plan_context(LLAMA_8B, LoadOptions(), 6 * GiB, [], num_ctx=None, num_parallel=None)
    assert small.num_parallel == 1 and small.num_ctx < 32768
    gpu = Device("GPU0", "", DeviceKind.GPU, 24 * GiB, 20 * GiB, "CUDA")
    roomy = plan_context(LLAMA_8B, LoadOptions(), 6 * GiB, [gpu], num_ctx=None, num_parallel=None)
    assert roomy.num_ctx == 32768 and roomy.num_parallel > small.num_parallel


def test_the_slot_setting_and_an_explicit_num_ctx_are_kept() -> None:
    plan = plan_context(GEMMA_270M, LoadOptions(), 20 * GiB, [], num_ctx=8192, num_parallel=2)
    assert (plan.num_ctx, plan.num_parallel) == (8192, 2)
    assert plan.context_pool == 8192  # one request at its maximum; two at a chat's share
    tiny = plan_context(GEMMA_270M, LoadOptions(), 20 * GiB, [], num_ctx=1024, num_parallel=4)
    assert (tiny.num_ctx, tiny.context_pool) == (1024, 4096)  # each slot needs at most num_ctx


def test_an_explicit_num_ctx_memory_cannot_hold_is_refused_naming_both_numbers() -> None:
    with pytest.raises(OptionError) as caught:
        plan_context(LONG_8B, LoadOptions(), 8 * GiB, [], num_ctx=131072, num_parallel=None)
    message = str(caught.value)
    assert "131072" in message and "holds at most" in message


def test_a_request_num_ctx_above_the_trained_context_is_refused_a_modelfiles_is_capped() -> None:
    with pytest.raises(OptionError, match=r"100000.*trained context of 2048"):
        merge_options({}, {"num_ctx": 100000}, n_ctx_train=2048)
    _, _, extras = merge_options({"num_ctx": 100000}, {}, n_ctx_train=2048)
    assert extras["num_ctx"] == 2048
    _, _, extras = merge_options({}, {}, n_ctx_train=2048)
    assert extras["num_ctx"] is None  # not set: planned from memory


def test_batch_invariance_is_a_load_option_over_the_daemon_default() -> None:
    base = LoadOptions(batch_invariant=False, kv_cache_type="auto")
    load, _, _ = merge_options({}, {}, base=base)
    assert not load.batch_invariant
    load, _, _ = merge_options({"batch_invariant": True}, {}, base=base)  # Modelfile
    assert load.batch_invariant
    load, _, _ = merge_options({}, {"batch_invariant": True}, base=base)  # request options
    assert load.batch_invariant


def test_speculative_decoding_is_the_daemons_setting_and_no_request_changes_it() -> None:
    """LOCALRUN_SPECULATIVE reaches every load; a request cannot ask for a reload over it."""
    for daemon in (True, False):
        base = LoadOptions(speculative=daemon)
        load, _, _ = merge_options({"speculative": not daemon}, {"speculative": not daemon}, base=base)
        assert load.speculative is daemon


def test_only_a_prompt_that_may_overflow_needs_num_keep() -> None:
    from localrun.server.service import might_overflow

    assert not might_overflow("hello " * 100, 4096)  # 600 bytes: at most ~600 tokens
    assert might_overflow("hello " * 1000, 4096)
    assert might_overflow("é" * 2100, 4096)  # 4,200 bytes: a tokenizer might make 4,200 tokens of them


def test_a_modelfile_problem_is_logged_once_not_at_every_request(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="localrun.server.options")
    for _ in range(3):  # values no other test uses: the warnings are remembered per process
        _, _, extras = merge_options({"num_ctx": 777777, "temperature": "hot-7"}, {}, n_ctx_train=2048)
        assert extras["num_ctx"] == 2048
    assert sorted(r.getMessage() for r in caplog.records) == [
        "Modelfile num_ctx 777777 is above the model's trained context; using 2048",
        "ignoring bad Modelfile parameter temperature='hot-7'"]

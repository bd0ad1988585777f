"""/api/ps shows where llama.cpp says it put the layers, not only where the plan wanted them."""

from __future__ import annotations

from localrun.engine.types import ModelInfo
from localrun.hardware.memory import reconcile
from localrun.hardware.placement import Placement

PLAN = Placement(gpu_layers=10, ram=400, vram=600, total_layers=19, vram_by_device=(("CUDA0", 600),))


def _report(**placed: int) -> ModelInfo:
    """A load report saying only where llama.cpp put the layers and weights."""
    return ModelInfo(architecture="llama", n_params=0, n_ctx_train=2048, n_embd=8, n_layer=18, n_vocab=32,
                     chat_template=None, bos_text="", eos_text="", size_bytes=1000, num_ctx=2048,
                     num_parallel=1, **placed)


def test_no_report_keeps_the_plan() -> None:
    assert reconcile(PLAN, None) is PLAN
    assert reconcile(PLAN, _report(offload_layers=0)) is PLAN


def test_matching_report_keeps_the_plan() -> None:
    assert reconcile(PLAN, _report(gpu_layers=10, offload_layers=19)) is PLAN


def test_fewer_layers_placed_than_planned_shows_the_real_split() -> None:
    got = reconcile(PLAN, _report(gpu_layers=5, offload_layers=19, gpu_buffer_bytes=250, cpu_buffer_bytes=750))
    assert (got.gpu_layers, got.total_layers, got.vram, got.ram) == (5, 19, 250, 750)
    assert got.processor() == "75%/25% CPU/GPU"


def test_nothing_offloaded_reads_cpu_only() -> None:
    got = reconcile(PLAN, _report(gpu_layers=0, offload_layers=19))
    assert got.processor() == "100% CPU" and got.vram == 0 and got.vram_by_device == ()

"""/api/ps shows where llama.cpp says it put the layers, not only where the plan wanted them."""

from __future__ import annotations

from localrun.hardware.memory import reconcile
from localrun.hardware.placement import Placement

PLAN = Placement(gpu_layers=10, ram=400, vram=600, total_layers=19, vram_by_device=(("CUDA0", 600),))


def test_no_report_keeps_the_plan() -> None:
    assert reconcile(PLAN, None) is PLAN
    assert reconcile(PLAN, {"offload_layers": 0}) is PLAN


def test_matching_report_keeps_the_plan() -> None:
    assert reconcile(PLAN, {"gpu_layers": 10, "offload_layers": 19}) is PLAN


def test_fewer_layers_placed_than_planned_shows_the_real_split() -> None:
    got = reconcile(PLAN, {"gpu_layers": 5, "offload_layers": 19, "gpu_buffer_bytes": 250, "cpu_buffer_bytes": 750})
    assert (got.gpu_layers, got.total_layers, got.vram, got.ram) == (5, 19, 250, 750)
    assert got.processor() == "75%/25% CPU/GPU"


def test_nothing_offloaded_reads_cpu_only() -> None:
    got = reconcile(PLAN, {"gpu_layers": 0, "offload_layers": 19})
    assert got.processor() == "100% CPU" and got.vram == 0 and got.vram_by_device == ()

"""Device model, offload planning with fake GPUs, llama.cpp load-log parsing, probe error handling."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from localrun.engine.load_report import LoadReport, parse_load_report
from localrun.fmt import processor_split
from localrun.hardware import devices
from localrun.hardware.devices import Device, DeviceKind, FakeProbe, cpu_device, fake_gpu
from localrun.hardware.placement import DEFAULT_RESERVE, Placement, plan_offload

MiB = 1024 * 1024
GiB = 1024 * MiB


def test_device_kind_follows_ggml_enum_order() -> None:
    assert [DeviceKind.from_ggml(i) for i in range(5)] == [
        DeviceKind.CPU, DeviceKind.GPU, DeviceKind.IGPU, DeviceKind.ACCEL, DeviceKind.META]
    assert DeviceKind.from_ggml(99) is DeviceKind.ACCEL  # unknown future types never count as GPUs


def test_device_round_trips_through_json_dict() -> None:
    gpu = fake_gpu(8, free_gib=6)
    assert Device.from_dict(gpu.to_dict()) == gpu
    assert gpu.to_dict()["kind"] == "gpu"
    assert (gpu.total_bytes, gpu.free_bytes) == (8 * GiB, 6 * GiB)
    assert gpu.is_gpu and not gpu.is_igpu and not cpu_device().is_gpu


def test_fake_probe_is_an_8_gib_gpu_beside_the_cpu() -> None:
    probe = FakeProbe([cpu_device(32), fake_gpu(8)])
    listed = devices.list_devices(probe)
    assert [d.kind for d in listed] == [DeviceKind.CPU, DeviceKind.GPU]
    assert listed[1].total_bytes == 8 * GiB


# --- plan_offload -------------------------------------------------------------------------------

def _plan13b(**kw: object) -> Placement:
    """A 13B-like model: 40 blocks of 300 MiB, a 400 MiB output layer, 500 MiB of embeddings."""
    args: dict[str, object] = dict(output_bytes=400 * MiB, input_bytes=500 * MiB, compute_bytes=256 * MiB,
                                   devices=[cpu_device(64), fake_gpu(8)])
    args.update(kw)
    return plan_offload(40, 300 * MiB, **args)  # type: ignore[arg-type]


def test_cpu_only_machine_keeps_everything_on_cpu() -> None:
    plan = plan_offload(32, 100 * MiB, devices=[cpu_device()], num_gpu=20)
    assert plan.gpu_layers == 0
    assert plan.processor() == "100% CPU"
    assert plan.layers_per_device == (("CPU", 33),)


def test_small_model_goes_entirely_to_an_8_gib_gpu() -> None:
    plan = plan_offload(24, 50 * MiB, kv_bytes_per_layer=8 * MiB, output_bytes=100 * MiB,
                        input_bytes=100 * MiB, compute_bytes=200 * MiB, devices=[cpu_device(), fake_gpu(8)])
    assert plan.gpu_layers == 25 == plan.total_layers
    assert plan.processor() == "100% GPU"
    assert dict(plan.vram_by_device)["CUDA0"] == 24 * 58 * MiB + 100 * MiB + 200 * MiB


def test_big_model_is_split_and_the_gpu_part_fits_in_8_gib() -> None:
    plan = _plan13b()
    # budget 8192 - 512 reserve - 256 compute = 7424 MiB: output 400 + 23 blocks of 300 = 7300 MiB
    assert plan.gpu_layers == 24
    assert plan.fits
    assert dict(plan.layers_per_device) == {"CPU": 17, "CUDA0": 24}
    assert plan.vram <= 8 * GiB - DEFAULT_RESERVE
    assert plan.processor() == "44%/56% CPU/GPU"  # CPU 500+256+17*300 MiB, GPU 7300+256 MiB
    one_more = _plan13b(num_gpu=25)
    assert not one_more.fits


def test_free_memory_not_total_decides() -> None:
    busy = _plan13b(devices=[cpu_device(), fake_gpu(8, free_gib=2)])
    assert busy.gpu_layers == 3  # 2048 - 512 - 256 = 1280 MiB: output 400 + 2 blocks (3 would be 1300)


@pytest.mark.parametrize(("num_gpu", "expected"), [(0, 0), (10, 10), (41, 41), (1000, 41), (-1, 41)])
def test_num_gpu_is_honoured_and_clamped(num_gpu: int, expected: int) -> None:
    plan = _plan13b(num_gpu=num_gpu)
    assert plan.gpu_layers == expected
    assert dict(plan.layers_per_device).get("CUDA0", 0) == expected


def test_forced_offload_beyond_vram_is_honoured_but_marked_not_fitting() -> None:
    plan = _plan13b(num_gpu=-1)
    assert plan.gpu_layers == 41 and not plan.fits
    assert plan.processor() == "100% GPU"


def test_one_offloaded_layer_is_the_output_layer() -> None:
    plan = _plan13b(num_gpu=1)
    assert dict(plan.vram_by_device)["CUDA0"] == 400 * MiB + 256 * MiB


def test_partial_split_never_reads_as_all_on_one_side() -> None:
    plan = plan_offload(200, 100 * MiB, output_bytes=1, devices=[cpu_device(), fake_gpu(80)], num_gpu=1)
    assert plan.processor() == "99%/1% CPU/GPU"


def test_two_gpus_share_layers_by_free_memory() -> None:
    plan = plan_offload(30, 100 * MiB, devices=[cpu_device(), fake_gpu(8, name="CUDA0"),
                                                 fake_gpu(16, name="CUDA1")])
    assert plan.gpu_layers == 31
    layers = dict(plan.layers_per_device)
    assert layers["CUDA0"] + layers["CUDA1"] == 31
    assert layers["CUDA0"] in (10, 11)  # a third of the layers for a third of the memory
    assert plan.tensor_split == pytest.approx((layers["CUDA0"] / 31, layers["CUDA1"] / 31), abs=1e-3)


def test_integrated_gpu_only_used_without_a_discrete_one_and_accelerators_never() -> None:
    igpu = fake_gpu(4, name="Vulkan1", kind=DeviceKind.IGPU)
    accel = Device("BLAS", "Accelerate", DeviceKind.ACCEL, 0, 0, "BLAS")
    assert plan_offload(4, MiB, devices=[cpu_device(), igpu, accel]).gpu_layers == 5
    with_dgpu = plan_offload(4, MiB, devices=[cpu_device(), igpu, fake_gpu(8)])
    assert "Vulkan1" not in dict(with_dgpu.layers_per_device)
    assert plan_offload(4, MiB, devices=[cpu_device(), accel]).gpu_layers == 0


def test_negative_sizes_are_rejected() -> None:
    with pytest.raises(ValueError):
        plan_offload(4, -1)


@given(
    n_layers=st.integers(0, 120),
    layer_mib=st.integers(0, 2000),
    gpus=st.lists(st.integers(0, 96), min_size=0, max_size=3),
    num_gpu=st.one_of(st.none(), st.integers(-1, 200)),
)
def test_plan_invariants(n_layers: int, layer_mib: int, gpus: list[int], num_gpu: int | None) -> None:
    devs = [cpu_device()] + [fake_gpu(g, name=f"CUDA{i}") for i, g in enumerate(gpus)]
    plan = plan_offload(n_layers, layer_mib * MiB, output_bytes=layer_mib * MiB, devices=devs, num_gpu=num_gpu)
    assert 0 <= plan.gpu_layers <= plan.total_layers == n_layers + 1
    assert sum(n for _, n in plan.layers_per_device) == plan.total_layers
    assert sum(n for name, n in plan.layers_per_device if name != "CPU") == plan.gpu_layers
    assert plan.size >= (n_layers + 1) * layer_mib * MiB
    if num_gpu is None:
        assert plan.fits
        budget = {d.name: d.free_bytes - DEFAULT_RESERVE for d in devs[1:]}
        assert all(b <= budget[name] for name, b in plan.vram_by_device)


# --- what llama.cpp reports -------------------------------------------------------------------

CPU_LOG = """\
print_info: n_layer               = 4
load_tensors: layer   0 assigned to device CPU, is_swa = 0
load_tensors: layer   1 assigned to device CPU, is_swa = 0
load_tensors: layer   2 assigned to device CPU, is_swa = 0
load_tensors: layer   3 assigned to device CPU, is_swa = 0
load_tensors: layer   4 assigned to device CPU, is_swa = 0
load_tensors:   CPU_Mapped model buffer size =     0.97 MiB
"""

CUDA_LOG = """\
load_tensors: layer   0 assigned to device CPU, is_swa = 0
load_tensors: layer   1 assigned to device CPU, is_swa = 0
load_tensors: layer   2 assigned to device CUDA0, is_swa = 0
load_tensors: layer   3 assigned to device CUDA0, is_swa = 0
load_tensors: layer   4 assigned to device CUDA0, is_swa = 0
load_tensors: offloading output layer to GPU
load_tensors: offloading 2 repeating layers to GPU
load_tensors: offloaded 3/5 layers to GPU
load_tensors:        CUDA0 model buffer size =   300.00 MiB
load_tensors:   CPU_Mapped model buffer size =   200.00 MiB
llama_kv_cache:      CUDA0 KV buffer size =    64.00 MiB
"""


def _processor(report: LoadReport) -> str:
    """The PROCESSOR column for what llama.cpp reports it did."""
    return processor_split(report.cpu_bytes, report.gpu_bytes, report.gpu_layers, report.total_layers)


def test_cpu_load_log_reads_as_all_cpu() -> None:
    report = parse_load_report(CPU_LOG)
    assert report.total_layers == 5 and report.gpu_layers == 0
    assert _processor(report) == "100% CPU"
    assert report.buffers == {"CPU_Mapped": int(0.97 * MiB)}


def test_partial_cuda_load_log_matches_the_plan() -> None:
    report = parse_load_report(CUDA_LOG)
    assert report.offloaded == (3, 5)
    assert report.gpu_layers == 3
    assert [i for i, d in report.layer_devices.items() if d != "CPU"] == [2, 3, 4]  # the last k layers
    assert _processor(report) == "40%/60% CPU/GPU"
    plan = plan_offload(4, MiB, devices=[cpu_device(), fake_gpu(8)], num_gpu=3)
    assert plan.gpu_layers == report.gpu_layers
    assert dict(plan.layers_per_device) == {"CPU": 2, "CUDA0": 3}


def test_offloaded_line_alone_is_enough() -> None:
    report = parse_load_report("load_tensors: offloaded 33/33 layers to GPU\n"
                               "load_tensors:        CUDA0 model buffer size =  4000.00 MiB\n"
                               "load_tensors:    CUDA_Host model buffer size =   100.00 MiB\n")
    assert (report.gpu_layers, report.total_layers) == (33, 33)
    assert report.cpu_bytes == 100 * MiB  # pinned host memory is not VRAM
    assert _processor(report) == "100% GPU"


class _CountingProbe:
    def __init__(self, devs: list[Device]) -> None:
        self.devs, self.calls = devs, 0

    def list_devices(self) -> list[Device]:
        self.calls += 1
        return list(self.devs)


def test_cache_probes_a_cpu_only_machine_once_and_a_gpu_machine_again_after_invalidate() -> None:
    cache = devices._Cache()
    cpu_only = _CountingProbe([cpu_device(1)])
    cache.get(cpu_only), cache.get(cpu_only)
    assert cpu_only.calls == 1
    assert cache.get(cpu_only)[0].total_bytes > 1 * GiB  # CPU memory refreshed from psutil

    cache = devices._Cache()
    gpu = _CountingProbe([cpu_device(1), fake_gpu(8)])
    cache.get(gpu)
    cache.invalidate()  # a model loaded or unloaded: free GPU memory changed
    cache.get(gpu)
    assert gpu.calls == 2


def test_a_model_switch_on_a_cpu_only_machine_starts_no_probe_process() -> None:
    cache = devices._Cache()
    cpu_only = _CountingProbe([cpu_device(1)])
    cache.get(cpu_only)
    cache.invalidate()  # what every load and unload does
    assert cache.get(cpu_only)[0].total_bytes > 1 * GiB  # free RAM still read fresh, from psutil
    assert cpu_only.calls == 1

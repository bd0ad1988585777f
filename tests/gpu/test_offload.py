"""Partial offload: the layers llama.cpp places on the GPU are the ones plan_offload said it would.

The model is loaded with llama.cpp's low-level API and its load log (the ``load_tensors:`` lines,
some at DEBUG level) is read back with :func:`localrun.engine.load_report.parse_load_report`: the same path the
engine uses to report the processor split in ``/api/ps``.

``@pytest.mark.gpu`` tests need a GPU build of llama-cpp-python and a GPU; they are skipped
otherwise (see packaging/README.md, "Running the GPU tests"). The unmarked test runs on every
build, so the log capture and parsing the GPU tests rely on are exercised on CPU-only CI too.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest
from tinymodel import write_tiny_gguf

from localrun.engine.load_report import LoadReport, parse_load_report
from localrun.fmt import processor_split
from localrun.hardware import devices
from localrun.hardware.placement import Placement, plan_offload

llama_cpp = pytest.importorskip("llama_cpp")

N_LAYER = 4  # blocks; llama.cpp counts N_LAYER + 1 offloadable layers (the output layer too)


@functools.cache
def _gpu_devices() -> tuple[devices.Device, ...]:
    try:
        report = devices.probe_native()
    except Exception:
        return ()
    if not report.build.supports_gpu_offload:
        return ()
    return tuple(d for d in report.devices if d.is_gpu)


needs_gpu = pytest.mark.skipif(not _gpu_devices(), reason="needs a GPU build of llama-cpp-python and a GPU")


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("offload") / "tiny4.gguf", n_layer=N_LAYER)


@pytest.fixture
def captured_log() -> Iterator[list[str]]:
    """llama.cpp's log lines while the test runs (llama-cpp-python's own logger is put back after)."""
    lines: list[str] = []

    @llama_cpp.llama_log_callback  # type: ignore[misc]
    def capture(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        lines.append(text.decode("utf-8", "replace"))

    llama_cpp.llama_log_set(capture, ctypes.c_void_p(0))
    try:
        yield lines
    finally:
        from llama_cpp import _logger

        llama_cpp.llama_log_set(_logger.llama_log_callback, ctypes.c_void_p(0))


def _load(path: Path, n_gpu_layers: int, log: list[str]) -> LoadReport:
    log.clear()
    params = llama_cpp.llama_model_default_params()
    params.use_extra_bufts = False  # the AMX crash: see ENGINE_NOTES.md
    params.n_gpu_layers = n_gpu_layers
    model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
    assert model, "llama.cpp could not load the tiny model"
    llama_cpp.llama_model_free(model)
    return parse_load_report("".join(log))


def _plan(num_gpu: int) -> Placement:
    listed = list(devices.GgmlProbe().list_devices())
    return plan_offload(N_LAYER, 1024, output_bytes=1024, devices=listed, num_gpu=num_gpu, reserve_bytes=0)


def test_the_load_report_matches_the_plan_on_this_build(model_path: Path, captured_log: list[str]) -> None:
    report = _load(model_path, 3, captured_log)
    assert report.total_layers == N_LAYER + 1, "llama.cpp's per-layer placement lines were not captured"
    assert report.gpu_layers == _plan(3).gpu_layers  # 0 on a CPU-only build, 3 with a GPU
    assert report.buffers, "no model buffer sizes were captured"


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("num_gpu", [0, 1, 3, N_LAYER + 1, -1])
def test_num_gpu_layers_are_placed_as_planned(model_path: Path, captured_log: list[str], num_gpu: int) -> None:
    plan = _plan(num_gpu)
    report = _load(model_path, num_gpu, captured_log)
    assert report.gpu_layers == plan.gpu_layers
    on_gpu = sorted(i for i, d in report.layer_devices.items() if not d.upper().startswith("CPU"))
    assert on_gpu == list(range(N_LAYER + 1 - plan.gpu_layers, N_LAYER + 1))  # the last k layers
    if plan.gpu_layers:
        assert report.offloaded == (plan.gpu_layers, N_LAYER + 1)
        assert report.gpu_bytes > 0
    # the processor column Ollama users read: all CPU, all GPU, or a split
    expected = {0: "100% CPU", N_LAYER + 1: "100% GPU"}.get(plan.gpu_layers, "CPU/GPU")
    reported = processor_split(report.cpu_bytes, report.gpu_bytes, report.gpu_layers, report.total_layers)
    assert expected in reported and expected in plan.processor()


@pytest.mark.gpu
@needs_gpu
def test_gpu_devices_report_memory_and_a_tiny_model_fits_entirely() -> None:
    listed = devices.list_devices()
    gpus = [d for d in listed if d.is_gpu]
    assert gpus and all(0 < d.free_bytes <= d.total_bytes for d in gpus)
    plan = plan_offload(N_LAYER, 1024 * 1024, devices=listed)
    assert plan.gpu_layers == N_LAYER + 1 and plan.processor() == "100% GPU"

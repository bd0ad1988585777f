"""Settings: documented defaults, accepted forms, and a clear error naming the variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from localrun import config
from localrun.errors import ConfigError


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("LOCALRUN_HOST", "LOCALRUN_MODELS", "LOCALRUN_KEEP_ALIVE", "LOCALRUN_MAX_QUEUE",
                "LOCALRUN_NUM_PARALLEL", "LOCALRUN_BATCH_INVARIANT"):
        monkeypatch.delenv(var, raising=False)
    s = config.load_settings()
    assert (s.host.host, s.host.port) == ("127.0.0.1", 11435)
    assert s.host.is_loopback
    assert s.models_dir.name == "models"
    assert s.keep_alive == 300.0
    assert s.max_queue == 512
    assert s.num_parallel is None  # sized per model from free memory when it loads
    assert s.batch_invariant is False  # the fastest kernels; deterministic mode on request
    assert s.api_key is None and s.origins == ()


@pytest.mark.parametrize(
    ("value", "host", "port"),
    [
        ("0.0.0.0", "0.0.0.0", 11435),
        ("localhost:8080", "localhost", 8080),
        ("http://127.0.0.1:9000/", "127.0.0.1", 9000),
        (":7000", "127.0.0.1", 7000),
        ("[::1]:7001", "::1", 7001),
        ("::1", "::1", 11435),
    ],
)
def test_host_forms(monkeypatch: pytest.MonkeyPatch, value: str, host: str, port: int) -> None:
    monkeypatch.setenv("LOCALRUN_HOST", value)
    assert config.host() == config.HostPort(host, port)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("5m", 300.0), ("1h30m", 5400.0), ("300", 300.0), ("0", 0.0), ("-1", None), ("-1m", None),
     ("250ms", 0.25), ("1.5", 1.5)],
)
def test_keep_alive_forms(monkeypatch: pytest.MonkeyPatch, value: str, seconds: float | None) -> None:
    monkeypatch.setenv("LOCALRUN_KEEP_ALIVE", value)
    assert config.keep_alive() == seconds


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("LOCALRUN_HOST", "127.0.0.1:99999"),
        ("LOCALRUN_HOST", "127.0.0.1:http"),
        ("LOCALRUN_KEEP_ALIVE", "five minutes"),
        ("LOCALRUN_KEEP_ALIVE", "5x"),
        ("LOCALRUN_MAX_LOADED_MODELS", "0"),
        ("LOCALRUN_MAX_LOADED_MODELS", "three"),
        ("LOCALRUN_NUM_PARALLEL", "-2"),
        ("LOCALRUN_NUM_PARALLEL", "65"),
        ("LOCALRUN_NUM_THREAD", "-1"),
        ("LOCALRUN_NUM_THREAD", "513"),
        ("LOCALRUN_REPACK", "maybe"),
        ("LOCALRUN_CONTEXT_LENGTH", "8"),
        ("LOCALRUN_CONTEXT_LENGTH", "64k"),
        ("LOCALRUN_MAX_QUEUE", "1.5"),
        ("LOCALRUN_ORIGINS", "not an origin"),
        ("LOCALRUN_API_KEY", "has space"),
        ("LOCALRUN_FETCH_IMAGES", "sometimes"),
    ],
)
def test_bad_values_name_the_variable(monkeypatch: pytest.MonkeyPatch, var: str, value: str) -> None:
    monkeypatch.setenv(var, value)
    with pytest.raises(ConfigError, match=var):
        config.load_settings()


def test_models_dir_must_be_a_directory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    monkeypatch.setenv("LOCALRUN_MODELS", str(f))
    with pytest.raises(ConfigError, match="LOCALRUN_MODELS"):
        config.models_dir()


def test_origins_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCALRUN_ORIGINS", "https://app.example, http://tool.local:3000")
    assert config.origins() == ("https://app.example", "http://tool.local:3000")


def test_kv_cache_type_defaults_to_auto_and_names_the_variable_on_a_bad_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOCALRUN_KV_CACHE_TYPE", raising=False)
    assert config.kv_cache_type() == "auto"
    monkeypatch.setenv("LOCALRUN_KV_CACHE_TYPE", " BF16 ")
    assert config.kv_cache_type() == "bf16"
    monkeypatch.setenv("LOCALRUN_KV_CACHE_TYPE", "q4_0")
    with pytest.raises(ConfigError, match="LOCALRUN_KV_CACHE_TYPE"):
        config.load_settings()


def test_batch_invariant_is_off_by_default_and_names_the_variable_on_a_bad_value(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOCALRUN_BATCH_INVARIANT", raising=False)
    assert config.batch_invariant() is False
    for raw, value in (("0", False), (" off ", False), ("FALSE", False), ("1", True), ("yes", True)):
        monkeypatch.setenv("LOCALRUN_BATCH_INVARIANT", raw)
        assert config.batch_invariant() is value
    monkeypatch.setenv("LOCALRUN_BATCH_INVARIANT", "maybe")
    with pytest.raises(ConfigError, match="LOCALRUN_BATCH_INVARIANT"):
        config.load_settings()


def test_speculative_is_on_by_default_reported_and_names_the_variable_on_a_bad_value(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOCALRUN_SPECULATIVE", raising=False)
    assert config.speculative() is True
    assert config.load_settings().report()["LOCALRUN_SPECULATIVE"] == "1"
    for raw, value in (("0", False), ("off", False), ("1", True), ("ON", True)):
        monkeypatch.setenv("LOCALRUN_SPECULATIVE", raw)
        assert config.speculative() is value
    monkeypatch.setenv("LOCALRUN_SPECULATIVE", "0")
    assert config.load_settings().report()["LOCALRUN_SPECULATIVE"] == "0"
    monkeypatch.setenv("LOCALRUN_SPECULATIVE", "sometimes")
    with pytest.raises(ConfigError, match="LOCALRUN_SPECULATIVE"):
        config.load_settings()


def test_num_parallel_is_sized_per_model_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOCALRUN_NUM_PARALLEL", raising=False)
    assert config.num_parallel() is None
    monkeypatch.setenv("LOCALRUN_NUM_PARALLEL", "3")
    assert config.num_parallel() == 3
    monkeypatch.setenv("LOCALRUN_NUM_PARALLEL", "0")
    with pytest.raises(ConfigError, match="LOCALRUN_NUM_PARALLEL"):
        config.num_parallel()


def test_context_length_is_each_models_trained_context_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOCALRUN_CONTEXT_LENGTH", raising=False)
    assert config.context_length() is None
    assert config.load_settings().report()["LOCALRUN_CONTEXT_LENGTH"] == "auto"
    monkeypatch.setenv("LOCALRUN_CONTEXT_LENGTH", "65536")
    assert config.context_length() == 65536
    assert config.load_settings().report()["LOCALRUN_CONTEXT_LENGTH"] == "65536"
    monkeypatch.setenv("LOCALRUN_CONTEXT_LENGTH", "auto")
    assert config.context_length() is None

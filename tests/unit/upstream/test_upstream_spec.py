"""Upstream names, URLs and lists: what `localrun upstream add` and LOCALRUN_UPSTREAMS accept, and the file."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from localrun import config
from localrun.errors import ConfigError, InvalidRequest, NotFound
from localrun.upstream import registry
from localrun.upstream.spec import Api, make_spec, parse_env


@pytest.mark.parametrize(("url", "root", "api"), [
    ("http://gpu-box:8000/v1", "http://gpu-box:8000", Api.OPENAI),
    ("http://gpu-box:8000/v1/", "http://gpu-box:8000", Api.OPENAI),
    ("https://host/prefix/api", "https://host/prefix", Api.OLLAMA),
    ("http://127.0.0.1:11435", "http://127.0.0.1:11435", None),
    ("http://[::1]:8000/v1", "http://[::1]:8000", Api.OPENAI),
])
def test_url_says_which_api(url: str, root: str, api: Api | None) -> None:
    spec = make_spec("gpu", url)
    assert (spec.url, spec.api) == (root, api)
    assert spec.display_url.rstrip("/") == url.rstrip("/")


@pytest.mark.parametrize(("name", "url", "words"), [
    ("hf.co", "http://x", "no dots"),
    ("Gpu", "http://x", "lowercase"),
    ("", "http://x", "lowercase"),
    ("gpu", "ftp://x", "http://"),
    ("gpu", "http://user:secret@x/v1", "must not hold a user or password"),
    ("gpu", "http://x/v1?key=secret", "no query"),
    ("gpu", "http://x:99999", "Port"),
])
def test_bad_upstreams_are_refused_clearly(name: str, url: str, words: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        make_spec(name, url)
    assert words.lower() in str(info.value).lower()
    assert "secret" not in str(info.value)


def test_key_env_is_a_variable_name_never_a_key() -> None:
    assert make_spec("gpu", "http://x", api_key_env="GPU_KEY").api_key_env == "GPU_KEY"
    with pytest.raises(InvalidRequest, match="NAME of an environment variable"):
        make_spec("gpu", "http://x", api_key_env="sk-live abc")


def test_env_list_pools_and_json_form(monkeypatch: pytest.MonkeyPatch) -> None:
    specs = parse_env("gpu=http://a:8000/v1, gpu=http://b:8000/v1,peer=http://c:11435")
    assert [(s.name, s.url) for s in specs] == [("gpu", "http://a:8000"), ("gpu", "http://b:8000"),
                                                ("peer", "http://c:11435")]
    full = parse_env('[{"name": "box", "url": "http://d/v1", "api_key_env": "BOX_KEY", "models": ["m1", "m2"]}]')
    assert full[0].models == ("m1", "m2") and full[0].api_key_env == "BOX_KEY"
    monkeypatch.setenv("LOCALRUN_UPSTREAMS", "gpu")
    with pytest.raises(ConfigError, match=r"LOCALRUN_UPSTREAMS.*NAME=URL"):
        config.upstreams()
    monkeypatch.setenv("LOCALRUN_UPSTREAMS", "gpu=http://a/v1")
    assert config.load_settings().report()["LOCALRUN_UPSTREAMS"] == "gpu=http://a/v1"


def test_rpc_servers_are_validated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCALRUN_RPC_SERVERS", "10.0.0.2:50052, 10.0.0.3:50052")
    assert config.rpc_servers() == ("10.0.0.2:50052", "10.0.0.3:50052")
    for bad in ("10.0.0.2", "host:0", "a b:1", ","):
        monkeypatch.setenv("LOCALRUN_RPC_SERVERS", bad)
        with pytest.raises(ConfigError, match="LOCALRUN_RPC_SERVERS"):
            config.rpc_servers()


def test_registry_round_trip_is_private_and_atomic(tmp_path: Path) -> None:
    path = tmp_path / "cfg" / "upstreams.json"
    registry.add(path, make_spec("gpu", "http://a:8000/v1", api_key_env="GPU_KEY"))
    registry.add(path, make_spec("gpu", "http://b:8000/v1"))
    registry.add(path, make_spec("gpu", "http://a:8000/v1", models="m1"))  # same member: replaced
    specs = registry.load(path)
    assert [(s.url, s.models) for s in specs] == [("http://b:8000", None), ("http://a:8000", ("m1",))]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["upstreams.json"]
    gone = registry.remove(path, "gpu", "http://b:8000")
    assert [s.url for s in gone] == ["http://b:8000"]
    with pytest.raises(NotFound, match="configured: gpu"):
        registry.remove(path, "nope")
    registry.remove(path, "gpu")
    assert registry.load(path) == ()


def test_a_broken_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "upstreams.json"
    path.write_text('{"upstreams": [{"name": "x", "url": "http://a", "token": "s"}]}')
    with pytest.raises(InvalidRequest, match="unknown upstream field"):
        registry.load(path)
    path.write_text("{nope")
    with pytest.raises(InvalidRequest, match="not valid JSON"):
        registry.load(path)

"""`localrun bench` arguments: defaults, URL forms and clear errors on bad input."""

from __future__ import annotations

import pytest

from localrun import config
from localrun.bench.runner import BenchConfig, requests_for
from localrun.cli.bench_cmd import build_config, normalize_url
from localrun.cli.main import build_parser, main
from localrun.errors import OptionError


def _cfg(*argv: str) -> BenchConfig:
    return build_config(build_parser().parse_args(["bench", *argv]))


def test_defaults_measure_the_local_daemon() -> None:
    cfg = _cfg()
    assert cfg.targets[0].base_url == config.host().url
    assert cfg.targets[0].label == "localrun"
    assert cfg.concurrency == (1, 4, 8, 16)
    assert (cfg.input_tokens, cfg.output_tokens, cfg.api) == (128, 64, "completions")


def test_daemon_api_key_is_used_only_for_the_daemon(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCALRUN_API_KEY", "sekret")
    cfg = _cfg("--compare", "127.0.0.1:8000")
    assert cfg.targets[0].api_key == "sekret"
    assert cfg.targets[1].api_key is None


@pytest.mark.parametrize(
    ("given", "expected"),
    [("127.0.0.1:8000", "http://127.0.0.1:8000"), ("http://h:1/v1/", "http://h:1"), ("https://h/v1", "https://h")],
)
def test_url_forms(given: str, expected: str) -> None:
    assert normalize_url(given) == expected


def test_compare_target_gets_a_distinct_label() -> None:
    cfg = _cfg("--base-url", "127.0.0.1:9", "--compare", "http://127.0.0.1:9/v1")
    assert cfg.targets[0].label != cfg.targets[1].label


def test_requests_per_level_cover_every_client() -> None:
    assert requests_for(_cfg("--requests", "8"), 16) == 16
    assert requests_for(_cfg("--requests", "8"), 4) == 8
    assert requests_for(_cfg(), 16) == 32
    assert requests_for(_cfg("--duration", "5"), 16) is None


@pytest.mark.parametrize(
    "argv",
    [["--concurrency", "1,x"], ["--concurrency", "0"], ["--requests", "0"], ["--requests", "4", "--duration", "3"],
     ["--endpoint", "embeddings"], ["--output-tokens", "-3"]],
)
def test_bad_arguments_exit_with_a_usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["bench", *argv])
    assert exc.value.code == 2
    assert "error" in capsys.readouterr().err


def test_chart_must_be_html() -> None:
    with pytest.raises(OptionError):
        _cfg("--chart", "out.png")


def test_compare_repeats_for_several_servers_with_their_own_labels_and_models() -> None:
    cfg = _cfg("--compare", "127.0.0.1:8000", "--compare-label", "llama-cpp-python", "--compare-model", "m1",
               "--compare", "127.0.0.1:8080", "--compare-label", "llama.cpp")
    assert [t.label for t in cfg.targets] == ["localrun", "llama-cpp-python", "llama.cpp"]
    assert [t.base_url for t in cfg.targets[1:]] == ["http://127.0.0.1:8000", "http://127.0.0.1:8080"]
    assert [t.model for t in cfg.targets[1:]] == ["m1", ""]


def test_more_compare_labels_than_compare_urls_is_an_error() -> None:
    with pytest.raises(OptionError, match="--compare-label"):
        _cfg("--compare", "127.0.0.1:8000", "--compare-label", "a", "--compare-label", "b")


def test_every_run_draws_a_fresh_prompt_seed_unless_one_is_given() -> None:
    assert len({_cfg().seed for _ in range(5)}) > 1
    assert _cfg("--seed", "7").seed == 7


def test_repeat_prompts_needs_a_request_count_and_no_first_pass_needs_the_seed() -> None:
    cfg = _cfg("--repeat-prompts", "--requests", "8")
    assert cfg.repeat_prompts and cfg.first_pass
    assert not _cfg("--repeat-prompts", "--no-first-pass", "--seed", "3").first_pass
    with pytest.raises(OptionError, match="--duration"):
        _cfg("--repeat-prompts", "--duration", "5")
    with pytest.raises(OptionError, match="--seed"):
        _cfg("--repeat-prompts", "--no-first-pass")

"""`localrun bench` end to end against servers on 127.0.0.1: a stand-in and the real daemon.

The stand-in is a tiny OpenAI-compatible aiohttp server that streams SSE one word per token,
with switches for the failures a benchmark must count rather than hide.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from localrun.bench.loadgen import Endpoint
from localrun.bench.runner import BenchConfig, run_bench
from localrun.cli.main import main
from localrun.errors import BenchError


@dataclass
class StandIn:
    """Behaviour switches of the stand-in server (mutable between runs)."""

    step_s: float = 0.002
    fail_every: int = 0  # every n-th generation request answers 503
    stall_above: int | None = None  # requests with max_tokens above this get one token, then hang
    reject_extras: bool = False  # 400 on ignore_eos/min_tokens, like a strict server
    usage: bool = True  # honour stream_options.include_usage
    tokenizer: bool = True  # serve /extras/tokenize
    stopping: bool = False  # set at teardown: stalled handlers end
    seen: list[dict] = field(default_factory=list)  # type: ignore[type-arg]


def _app(cfg: StandIn) -> web.Application:
    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "stand-in", "object": "model"}]})

    async def tokenize(request: web.Request) -> web.Response:
        if not cfg.tokenizer:
            raise web.HTTPNotFound()
        body = await request.json()
        return web.json_response({"tokens": list(range(1 + len(body["input"].split())))})

    async def generate(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        cfg.seen.append(body)
        if cfg.reject_extras and ("ignore_eos" in body or "min_tokens" in body):
            return web.json_response({"error": {"message": "unknown field ignore_eos"}}, status=400)
        if cfg.fail_every and len(cfg.seen) % cfg.fail_every == 0:
            return web.json_response({"error": {"message": "busy"}}, status=503)
        chat = request.path.endswith("/chat/completions")
        prompt = body["messages"][0]["content"] if chat else body["prompt"]
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        n = body["max_tokens"]
        for i in range(n):
            await asyncio.sleep(cfg.step_s)
            choice = {"index": 0, "finish_reason": "length" if i == n - 1 else None}
            choice.update({"delta": {"content": " w"}} if chat else {"text": " w"})
            await resp.write(f"data: {json.dumps({'choices': [choice]})}\n\n".encode())
            while cfg.stall_above is not None and n > cfg.stall_above and not cfg.stopping:
                await asyncio.sleep(0.05)
        if cfg.usage and (body.get("stream_options") or {}).get("include_usage"):
            usage = {"prompt_tokens": 1 + len(prompt.split()), "completion_tokens": n}
            await resp.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        return resp

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/extras/tokenize", tokenize)
    app.router.add_post("/v1/completions", generate)
    app.router.add_post("/v1/chat/completions", generate)
    return app


@contextlib.contextmanager
def _serve_standin() -> Iterator[tuple[str, StandIn]]:
    """A stand-in server on 127.0.0.1 in its own thread and loop; stopped on exit."""
    cfg = StandIn()
    loop = asyncio.new_event_loop()
    started = threading.Event()
    holder: dict[str, object] = {}

    async def start() -> None:
        runner = web.AppRunner(_app(cfg), shutdown_timeout=0.1)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        holder["runner"] = runner
        holder["port"] = runner.addresses[0][1]
        started.set()

    thread = threading.Thread(target=lambda: (loop.run_until_complete(start()), loop.run_forever()), daemon=True)
    thread.start()
    assert started.wait(10)
    try:
        yield f"http://127.0.0.1:{holder['port']}", cfg
    finally:
        cfg.stopping = True
        asyncio.run_coroutine_threadsafe(holder["runner"].cleanup(), loop).result(10)  # type: ignore[attr-defined]
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


@pytest.fixture
def standin() -> Iterator[tuple[str, StandIn]]:
    with _serve_standin() as served:
        yield served


def _config(url: str, **kw) -> BenchConfig:  # type: ignore[no-untyped-def]
    base = dict(targets=(Endpoint("standin", url, ""),), concurrency=(1, 3), input_tokens=32, output_tokens=8,
                requests=4, pause_s=0.0, timeout_s=10.0)
    base.update(kw)
    return BenchConfig(**base)  # type: ignore[arg-type]


async def test_every_level_is_measured_with_exact_prompts_and_pinned_output(standin: tuple[str, StandIn]) -> None:
    url, server = standin
    result = await run_bench(_config(url))
    assert [lv.stats.concurrency for lv in result.levels] == [1, 3]
    for lv in result.levels:
        s = lv.stats
        assert s.ok == s.requests >= 4 and s.errors == s.timeouts == 0
        assert s.mean_output_tokens == 8 and s.token_sources == ("usage",)
        assert s.mean_prompt_tokens == 32  # the stand-in counts words + 1, as its tokenizer does
        assert s.output_tok_s > 0 and s.ttft.p95 is not None and s.tpot.p50 is not None
    info = result.targets[0]
    assert info.model == "stand-in" and info.tokenizer.exact and set(info.extras_sent) == {"ignore_eos", "min_tokens"}
    measured = [b for b in server.seen if b["max_tokens"] == 8]
    assert all(b["stream"] and b["min_tokens"] == 8 and b["ignore_eos"] for b in measured)
    assert len({b["prompt"].split()[0:3].__repr__() for b in measured}) == len(measured)  # no reused prompt


async def test_compare_runs_both_targets_interleaved(standin: tuple[str, StandIn]) -> None:
    url, _ = standin
    cfg = _config(url, targets=(Endpoint("a", url, ""), Endpoint("b", url, "")), concurrency=(1, 2, 3))
    result = await run_bench(cfg)
    assert [(lv.target, lv.stats.concurrency) for lv in result.levels] == [
        ("a", 1), ("b", 1), ("b", 2), ("a", 2), ("a", 3), ("b", 3)]


async def test_server_errors_are_counted_and_reported(standin: tuple[str, StandIn]) -> None:
    url, server = standin
    server.fail_every = 3
    result = await run_bench(_config(url, concurrency=(2,), requests=6))
    s = result.levels[0].stats
    assert s.errors >= 1 and s.ok + s.errors == s.requests
    assert any("HTTP 503" in e for e in s.error_samples)
    assert any("errors" in w for w in result.warnings)


async def test_stalled_streams_count_as_timeouts(standin: tuple[str, StandIn]) -> None:
    url, server = standin
    server.stall_above = 4  # the priming request (4 tokens) passes, measured ones (8) hang
    result = await run_bench(_config(url, concurrency=(2,), requests=2, timeout_s=0.5))
    s = result.levels[0].stats
    assert s.timeouts == 2 and s.ok == 0


async def test_priming_fails_cleanly_when_every_request_times_out(standin: tuple[str, StandIn]) -> None:
    url, server = standin
    server.stall_above = 0
    with pytest.raises(BenchError, match="priming request"):
        await run_bench(_config(url, timeout_s=0.3))


async def test_optional_fields_a_server_rejects_are_dropped(standin: tuple[str, StandIn]) -> None:
    url, server = standin
    server.reject_extras, server.usage = True, False
    result = await run_bench(_config(url, concurrency=(2,)))
    s = result.levels[0].stats
    assert s.ok == s.requests and s.errors == 0
    assert result.targets[0].extras_sent == ()
    assert s.token_sources == ("max_tokens",)  # no usage: finish_reason "length" pins the count


async def test_duration_window_starts_after_warmup(standin: tuple[str, StandIn]) -> None:
    url, _ = standin
    result = await run_bench(_config(url, concurrency=(2,), requests=None, duration_s=0.4, warmup_s=0.2))
    s = result.levels[0].stats
    assert s.window_s == pytest.approx(0.4)
    assert s.warmup_requests >= 1 and s.requests >= 1


async def test_chat_endpoint_with_shared_prefix(standin: tuple[str, StandIn]) -> None:
    url, server = standin
    result = await run_bench(_config(url, api="chat", concurrency=(2,), shared_prefix=100, input_tokens=10))
    assert result.levels[0].stats.mean_prompt_tokens == 110
    prompts = [b["messages"][0]["content"] for b in server.seen if b["max_tokens"] == 8]
    prefix = prompts[0].split()[:99]
    assert all(p.split()[:99] == prefix for p in prompts) and len(set(prompts)) == len(prompts)


async def test_an_interrupted_run_keeps_the_levels_already_measured(standin: tuple[str, StandIn]) -> None:
    url, server = standin
    loop = asyncio.get_running_loop()

    def progress(msg: str) -> None:
        if "concurrency 1:" in msg:  # level 1 done: from now on measured requests hang
            server.stall_above = 4
        elif "concurrency 2," in msg:
            loop.call_later(0.3, task.cancel)

    task = asyncio.create_task(run_bench(_config(url, concurrency=(1, 2)), progress))
    result = await task
    assert result.interrupted
    assert [lv.stats.concurrency for lv in result.levels] == [1]
    assert any("interrupted during standin @ 2" in w for w in result.warnings)


async def test_without_a_tokenizer_prompt_lengths_are_reported_approximate(standin: tuple[str, StandIn]) -> None:
    url, server = standin
    server.tokenizer = False
    result = await run_bench(_config(url, concurrency=(1,), requests=1))
    assert not result.targets[0].tokenizer.exact
    assert "approximate" in result.targets[0].tokenizer.note


async def test_tokenizer_url_builds_exact_prompts_for_a_target_without_one(standin: tuple[str, StandIn]) -> None:
    url, server = standin
    server.tokenizer = False
    with _serve_standin() as (tok_url, _):
        result = await run_bench(_config(url, concurrency=(1,), requests=1, tokenizer_url=tok_url))
    info = result.targets[0].tokenizer
    assert info.exact and info.endpoint == tok_url + "/extras/tokenize"
    assert result.levels[0].stats.mean_prompt_tokens == 32


def test_cli_writes_table_json_and_chart(standin: tuple[str, StandIn], tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    url, _ = standin
    out, chart, md = tmp_path / "r.json", tmp_path / "r.html", tmp_path / "r.md"
    rc = main(["bench", "--base-url", url, "--concurrency", "1,2", "--requests", "2", "--output-tokens", "4",
               "--input-tokens", "16", "--pause", "0", "-q", "--json", str(out), "--chart", str(chart),
               "--markdown", str(md)])
    assert rc == 0
    assert "out tok/s" in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert [lv["concurrency"] for lv in data["levels"]] == [1, 2]
    detail = data["levels"][1]["requests_detail"]
    assert len(detail) == 2 and all(r["outcome"] == "ok" and r["output_tokens"] == 4 for r in detail)
    assert "<svg" in chart.read_text() and "| conc |" in md.read_text()


async def test_repeat_prompts_measures_each_prompt_a_second_time(standin: tuple[str, StandIn]) -> None:
    url, server = standin
    result = await run_bench(_config(url, concurrency=(1, 2), requests=3, repeat_prompts=True))
    measured = [b["prompt"] for b in server.seen if b["max_tokens"] == 8]
    # per level: a first pass of 3 prompts, then the same 3 again; the two levels use different prompts.
    # Two streams may reach the server in either order, so that level's passes compare as sets.
    assert measured[0:3] == measured[3:6] and sorted(measured[6:9]) == sorted(measured[9:12])
    assert len(set(measured)) == 6
    assert all(lv.stats.requests == 3 and lv.stats.ok == 3 for lv in result.levels)

    server.seen.clear()  # the same seed without the first pass: only the measured requests, same prompts
    await run_bench(_config(url, concurrency=(1, 2), requests=3, repeat_prompts=True, first_pass=False))
    again = [b["prompt"] for b in server.seen if b["max_tokens"] == 8]
    assert again[:3] == measured[3:6] and sorted(again[3:]) == sorted(measured[9:12])


async def test_another_seed_sends_other_prompts(standin: tuple[str, StandIn]) -> None:
    url, server = standin
    await run_bench(_config(url, concurrency=(1,), requests=2, seed=1))
    await run_bench(_config(url, concurrency=(1,), requests=2, seed=2))
    prompts = [b["prompt"] for b in server.seen if b["max_tokens"] == 8]
    assert len(prompts) == 4 and not set(prompts[:2]) & set(prompts[2:])


def test_cli_prints_a_fresh_seed_and_flags_regressions_against_a_baseline(
        standin: tuple[str, StandIn], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url, server = standin
    argv = ["bench", "--base-url", url, "--concurrency", "1", "--requests", "2", "--output-tokens", "4",
            "--input-tokens", "16", "--pause", "0", "-q"]
    assert main([*argv, "--json", str(tmp_path / "a.json")]) == 0
    first = capsys.readouterr()
    seeds = [line for line in first.err.splitlines() if line.startswith("prompt seed:")]
    assert len(seeds) == 1
    slow = json.loads((tmp_path / "a.json").read_text())  # a baseline 3x slower than this server
    for level in slow["levels"]:
        level["output_tok_s"] /= 3
        for metric in ("ttft", "tpot"):
            level[metric] = {k: v * 3 for k, v in level[metric].items() if k in ("p50", "p95")}
    (tmp_path / "slow.json").write_text(json.dumps(slow))
    assert main([*argv, "--baseline", str(tmp_path / "slow.json")]) == 0
    assert "no regression" in capsys.readouterr().out
    server.step_s = 0.02  # ten times slower per token: throughput and TPOT regress
    assert main([*argv, "--baseline", str(tmp_path / "a.json")]) == 1
    out = capsys.readouterr().out
    assert "REGRESSION" in out and "out tok/s" in out


def test_cli_reports_an_unreachable_target_as_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["bench", "--base-url", "http://127.0.0.1:9", "--concurrency", "1", "-q"])
    assert rc == 1
    assert "cannot reach" in capsys.readouterr().err


# --- the real daemon: aiohttp app + runner process + llama.cpp engine on the tiny GGUF -------------

_ENGINE = importlib.util.find_spec("localrun.engine.engine") is not None


@pytest.mark.skipif(not _ENGINE, reason="the engine (localrun.engine.engine) is not written yet")
@pytest.mark.timeout(180)
async def test_short_bench_against_the_daemon_on_the_tiny_model(tiny_gguf: Path) -> None:
    from daemon_helpers import DictStore  # the daemon tests' name -> GGUF store

    from localrun.config import load_settings
    from localrun.server.app import create_app

    app = create_app(load_settings(), store=DictStore({"tiny": tiny_gguf}))
    server = TestServer(app, host="127.0.0.1", handler_cancellation=True)
    await server.start_server()
    try:
        url = str(server.make_url("")).rstrip("/")
        for api in ("completions", "chat"):
            cfg = _config(url, targets=(Endpoint("localrun", url, "tiny"),), api=api, concurrency=(1, 4),
                          requests=4, output_tokens=16, timeout_s=60.0)
            result = await run_bench(cfg)
            # The daemon's /api/tokenize makes prompt lengths exact, and it honours ignore_eos/min_tokens,
            # so every request gets exactly the output length asked for.
            info = result.targets[0]
            assert info.tokenizer.exact and info.tokenizer.endpoint == "/api/tokenize", info.tokenizer.note
            assert set(info.extras_sent) == {"ignore_eos", "min_tokens"} and info.usage_requested
            for lv in result.levels:
                s = lv.stats
                assert (s.ok, s.errors, s.timeouts) == (s.requests, 0, 0), s.error_samples
                assert s.min_output_tokens == s.mean_output_tokens == 16 and s.short_outputs == 0
                if api == "completions":  # raw prompt: exactly what was built (chat adds its template)
                    assert s.mean_prompt_tokens == 32
                assert s.output_tok_s > 0 and s.ttft.p50 is not None
            assert not any("fewer than" in w for w in result.warnings)
        # --tokenizer-url pointing at the daemon: it needs a model name, taken from the matching target
        cfg = _config(url, targets=(Endpoint("localrun", url, "tiny"),), concurrency=(1,), requests=1,
                      output_tokens=4, timeout_s=60.0, tokenizer_url=url)
        info = (await run_bench(cfg)).targets[0].tokenizer
        assert info.exact and info.endpoint == url + "/api/tokenize", info.note
    finally:
        await server.close()

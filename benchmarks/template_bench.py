"""Cost of rendering chat templates safely: plain sandbox vs bounded sandbox vs bounded worker process.

Usage: ``python benchmarks/template_bench.py TEMPLATE_FILE [N]`` (a Jinja chat template, e.g. Qwen2.5's
``tokenizer.chat_template``). Renders a 10-message conversation with one tool N times (default 500)
each way and prints milliseconds per render and the ratios. Numbers move with the machine's load:
compare ratios from one run, and name the CPU.
"""

from __future__ import annotations

import asyncio
import platform
import sys
import time
from pathlib import Path

from jinja2.sandbox import ImmutableSandboxedEnvironment

from localrun.chat.template_limits import BoundedSandbox
from localrun.server import rendering

MESSAGES = [{"role": "system", "content": "You are helpful."}] + [
    {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} with a few words in it"} for i in range(9)]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "weather in a city", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def per_render(fn: object, n: int) -> float:
    started = time.perf_counter()
    for _ in range(n):
        fn()  # type: ignore[operator]
    return (time.perf_counter() - started) / n * 1000


async def worker_ms(source: str, n: int) -> float:
    await rendering.render_async(source, MESSAGES, TOOLS)  # starts the worker
    started = time.perf_counter()
    for _ in range(n):
        await rendering.render_async(source, MESSAGES, TOOLS)
    return (time.perf_counter() - started) / n * 1000


def main() -> None:
    source = Path(sys.argv[1]).read_text(encoding="utf-8")
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 500
    kwargs = {"messages": MESSAGES, "tools": TOOLS, "add_generation_prompt": True, "bos_token": "", "eos_token": ""}
    plain = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(source)
    bounded = BoundedSandbox(trim_blocks=True, lstrip_blocks=True).from_string(source)
    assert plain.render(**kwargs) == bounded.render(**kwargs)
    results = {
        "plain sandbox, in process": per_render(lambda: plain.render(**kwargs), n),
        "bounded sandbox, in process": per_render(lambda: bounded.render(**kwargs), n),
        "bounded sandbox, worker process": asyncio.run(worker_ms(source, n)),
    }
    rendering.close()
    print(f"{platform.processor() or platform.machine()}, Python {platform.python_version()}, {n} renders each")
    base = results["plain sandbox, in process"]
    for name, ms in results.items():
        print(f"{name:34s} {ms:7.3f} ms/render   x{ms / base:.2f}")


if __name__ == "__main__":
    main()

"""Images: time to first token of a one-image request and of its follow-up (issue #28 point 7).

    python benchmarks/vision_bench.py --localrun http://127.0.0.1:11435 --localrun-model tiny-vl \
        --llama http://127.0.0.1:8091 [--streams 1,4] [--rounds 3] [--size 224] [--json FILE]

Against two running servers with the same model and projector: localrun (a model created from
``FROM model.gguf`` + ``FROM mmproj.gguf``) and llama.cpp's ``llama-server -m model.gguf --mmproj
mmproj.gguf -np 4`` (what Ollama runs). At each stream count, that many clients at once, each with
its own new random image (so no run reuses another's cache):

1. **first**: ``user: [image] describe it`` (OpenAI ``image_url`` data URL), 1 token out;
2. **follow-up**: the same conversation, the reply, and ``user: and the colours?``, 1 token out:
   the image is the same, so a prefix cache can answer without encoding it again.

Then **text beside images** (``--tpot``): 4 text streams of 800 tokens, alone and again while a new
image request arrives every 0.4 s; per server, the median time per output token and the longest gap
between two tokens of a stream (an encode that stalls the batch shows as a gap of its length).

Prints median time to first token per server and the ratios localrun / llama-server (the targets:
first <= 1.05, follow-up <= 0.2). Sends only to the two URLs; bounded by ``--rounds``.
"""

from __future__ import annotations

import argparse
import base64
import concurrent.futures
import itertools
import json
import os
import statistics
import struct
import time
import zlib

import httpx


def random_png(size: int) -> bytes:
    """A valid RGB PNG of random pixels (never the same twice)."""
    raw = b"".join(b"\x00" + os.urandom(size * 3) for _ in range(size))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 1)) + chunk(b"IEND", b"")


def first_token(url: str, model: str, messages: list[dict[str, object]]) -> tuple[float, str]:
    """Seconds to the first streamed content (or the end), and the text of a 1-token reply."""
    body = {"model": model, "messages": messages, "max_tokens": 1, "temperature": 0, "stream": True}
    started = time.perf_counter()
    text = ""
    with httpx.Client(timeout=600) as client, client.stream("POST", f"{url}/v1/chat/completions", json=body) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            delta = json.loads(line[6:])["choices"][0].get("delta") or {}
            text += delta.get("content") or ""
    return time.perf_counter() - started, text


def one_client(url: str, model: str, size: int) -> tuple[float, float]:
    image = "data:image/png;base64," + base64.b64encode(random_png(size)).decode()
    turn: list[dict[str, object]] = [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": image}}, {"type": "text", "text": "describe it"}]}]
    first, reply = first_token(url, model, turn)
    turn += [{"role": "assistant", "content": reply or "."}, {"role": "user", "content": "and the colours?"}]
    follow_up, _ = first_token(url, model, turn)
    return first, follow_up


def text_stream(url: str, model: str, seed: int) -> list[float]:
    """The arrival times of one text stream's tokens (800 tokens, greedy, end-of-text ignored)."""
    body = {"model": model, "messages": [{"role": "user", "content": f"story {seed}: " + "go on " * 20}],
            "max_tokens": 800, "temperature": 0, "stream": True, "ignore_eos": True}
    times = []
    with httpx.Client(timeout=600) as client, client.stream("POST", f"{url}/v1/chat/completions", json=body) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                times.append(time.perf_counter())
    return times


def text_beside_images(url: str, model: str, size: int, images: bool) -> dict[str, float]:
    """4 text streams, with (``images``) a new one-image request every 0.4 s while they run."""
    done = False

    def arrivals() -> None:
        while not done:
            one_client(url, model, size)
            time.sleep(0.4)

    with concurrent.futures.ThreadPoolExecutor(5) as pool:
        feeder = pool.submit(arrivals) if images else None
        streams = list(pool.map(lambda i: text_stream(url, model, i), range(4)))
        done = True
        if feeder is not None:
            feeder.result()
    gaps = [b - a for times in streams for a, b in itertools.pairwise(times[1:])]  # from the 2nd token
    return {"tpot_s": statistics.median(gaps), "max_gap_s": max(gaps)}


def measure(url: str, model: str, streams: int, rounds: int, size: int) -> dict[str, float]:
    firsts: list[float] = []
    follow_ups: list[float] = []
    with concurrent.futures.ThreadPoolExecutor(streams) as pool:
        for _ in range(rounds):
            for first, follow_up in pool.map(lambda _: one_client(url, model, size), range(streams)):
                firsts.append(first)
                follow_ups.append(follow_up)
    return {"first_s": statistics.median(firsts), "follow_up_s": statistics.median(follow_ups)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--localrun", required=True)
    parser.add_argument("--localrun-model", required=True)
    parser.add_argument("--llama", required=True)
    parser.add_argument("--llama-model", default="model")
    parser.add_argument("--streams", default="1,4")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--size", type=int, default=224, help="image side in pixels")
    parser.add_argument("--tpot", action="store_true", help="also measure text streams beside image requests")
    parser.add_argument("--json")
    args = parser.parse_args()
    one_client(args.localrun, args.localrun_model, args.size)  # warm both (model loaded, first encode)
    one_client(args.llama, args.llama_model, args.size)
    results = []
    for streams in (int(s) for s in args.streams.split(",")):
        ours = measure(args.localrun, args.localrun_model, streams, args.rounds, args.size)
        theirs = measure(args.llama, args.llama_model, streams, args.rounds, args.size)
        row = {"streams": streams, "localrun": ours, "llama_server": theirs,
               "first_ratio": ours["first_s"] / theirs["first_s"],
               "follow_up_ratio": ours["follow_up_s"] / theirs["follow_up_s"]}
        results.append(row)
        print(f"{streams} stream(s): first image {ours['first_s'] * 1000:.0f} ms vs {theirs['first_s'] * 1000:.0f} ms "
              f"({row['first_ratio']:.2f}x); follow-up {ours['follow_up_s'] * 1000:.0f} ms vs "
              f"{theirs['follow_up_s'] * 1000:.0f} ms ({row['follow_up_ratio']:.2f}x)")
    if args.tpot:
        for name, url, model in (("localrun", args.localrun, args.localrun_model),
                                 ("llama-server", args.llama, args.llama_model)):
            alone = text_beside_images(url, model, args.size, images=False)
            beside = text_beside_images(url, model, args.size, images=True)
            results.append({"tpot": name, "alone": alone, "beside_images": beside})
            print(f"{name}: 4 text streams {alone['tpot_s'] * 1000:.1f} ms/token alone (longest gap "
                  f"{alone['max_gap_s'] * 1000:.0f} ms), {beside['tpot_s'] * 1000:.1f} ms/token beside image requests "
                  f"(longest gap {beside['max_gap_s'] * 1000:.0f} ms)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()

"""Images in the engine (issue #28 points 3-4): a tiny random-weight vision model (tests/tinyvision.py)
gives the very tokens llama.cpp's own server (``llama-server --mmproj``) gives on the same files, alone
and beside text requests, and a follow-up about the same image reuses its cells instead of encoding
it again. Every test runs on four layouts: LLaVA's (an image takes one position per embedding),
Qwen2-VL's (M-RoPE: an image's grid of embeddings takes max(height, width) positions), Qwen2.5-VL's
(the same, with window attention in the vision tower) and Qwen3-VL's (M-RoPE too, and deepstack:
each embedding carries features for a later layer as well)."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import httpx
import llamaserver
import pytest
from engine_helpers import collect
from tinymodel import CHATML_TEMPLATE
from tinyvision import tiny_png_bytes, write_tiny_vision

from localrun.chat.images import IMAGE_MARKER as CHAT_MARKER
from localrun.chat.prompt import render
from localrun.engine.engine import Engine
from localrun.engine.types import GenerateRequest, LoadOptions, PrefixCacheLocation, SamplingOptions, Truncation
from localrun.engine.vision import IMAGE_MARKER
from localrun.errors import ContextOverflow, InvalidRequest, UnsupportedCapability

GREEDY = SamplingOptions(temperature=0, num_predict=12, repeat_penalty=1.0)  # llama.cpp's default penalty
TIE = 0.01  # log-probabilities of greedy's two best tokens closer than this: batching may pick either
CONVERSATION = ("<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\nhi there<|im_end|>\n"
                f"<|im_start|>user\nlook {IMAGE_MARKER} and {IMAGE_MARKER} now<|im_end|>\n<|im_start|>assistant\n")


@pytest.fixture(scope="module", params=["llava", "qwen2vl", "qwen25vl", "qwen3vl"])
def vision_files(request: pytest.FixtureRequest,
                 tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[Path]]:
    folder = tmp_path_factory.mktemp("vision")
    model, mmproj = write_tiny_vision(folder, kind=request.param)
    pictures = []
    for i, (w, h) in enumerate([(40, 30), (20, 50), (64, 64)]):
        pictures.append(folder / f"img{i}.png")
        pictures[-1].write_bytes(tiny_png_bytes(w, h, i + 1))
    return model, mmproj, pictures


@pytest.fixture(scope="module")
def engine(vision_files: tuple[Path, Path, list[Path]]) -> Iterator[Engine]:
    model, mmproj, _ = vision_files
    with Engine(str(model), LoadOptions(num_ctx=512, num_parallel=6, num_batch=64, projector=str(mmproj))) as e:
        yield e


def run(engine: Engine, prompt: str, *images: Path, sampling: SamplingOptions = GREEDY) -> tuple[bytes, int, int]:
    """(the output's bytes, prompt tokens, cached tokens) of one greedy request (bytes: random weights
    print pieces of UTF-8 characters)."""
    result = collect(engine.submit(GenerateRequest(prompt, sampling, images=tuple(p.read_bytes() for p in images))))
    printed = b"".join(engine.vocab.piece(t) for t in result.generated)
    return printed, result.done.prompt_eval_count, result.done.cached_tokens


def chat(text: str) -> str:
    return render(CHATML_TEMPLATE, [{"role": "user", "content": text}])


@pytest.fixture(scope="module")
def llama_server(vision_files: tuple[Path, Path, list[Path]],
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """llama.cpp's own server on the same files (``--mmproj``), with our image marker pinned
    (``LLAMA_MEDIA_MARKER``; it picks a random one otherwise)."""
    model, mmproj, _ = vision_files
    log = tmp_path_factory.mktemp("llama-server") / "log"
    with llamaserver.serving(["-m", str(model), "--mmproj", str(mmproj), "-t", "2", "-c", "1024", "-np", "1",
                              "--no-warmup"], log, env={"LLAMA_MEDIA_MARKER": IMAGE_MARKER}) as url:
        yield url


def llama_cpp_tokens(server: str, prompt: str, images: list[Path], n: int = 12) -> list[int]:
    """llama.cpp's greedy tokens for the raw ``prompt`` with ``images`` (its /completion, no cache)."""
    return llama_cpp_completion(server, prompt, images, n)[0]


def llama_cpp_completion(server: str, prompt: str, images: list[Path], n: int = 12) -> tuple[list[int], int]:
    """llama.cpp's greedy tokens and its prompt token count (images count their embeddings there)."""
    body = {"prompt": {"prompt_string": prompt, "multimodal_data": [base64.b64encode(p.read_bytes()).decode()
                                                                    for p in images]},
            "n_predict": n, "temperature": 0, "return_tokens": True, "cache_prompt": False}
    reply = httpx.post(server + "/completion", json=body, timeout=120)
    assert reply.status_code == 200, reply.text
    return [int(t) for t in reply.json()["tokens"]], int(reply.json()["tokens_evaluated"])


def tokens(engine: Engine, prompt: str, *images: Path) -> list[int]:
    request = GenerateRequest(prompt, GREEDY, images=tuple(p.read_bytes() for p in images))
    return collect(engine.submit(request)).generated


def test_the_marker_is_one_string_for_the_chat_package_and_the_engine() -> None:
    from llama_cpp import mtmd_cpp

    assert CHAT_MARKER == IMAGE_MARKER == mtmd_cpp.mtmd_default_marker().decode()


def test_one_image_gives_llama_cpps_own_tokens(engine: Engine, vision_files: tuple[Path, Path, list[Path]],
                                               llama_server: str) -> None:
    picture = vision_files[2][0]
    prompt = chat(f"{IMAGE_MARKER}what is this?")
    want, evaluated = llama_cpp_completion(llama_server, prompt, [picture])
    assert tokens(engine, prompt, picture) == want
    _, prompt_tokens, _ = run(engine, prompt, picture)
    assert prompt_tokens == evaluated > len(engine.tokenize(chat("what is this?")))  # usage counts the image
    assert len(engine.tokenize(prompt, images=(picture.read_bytes(),))) == evaluated  # and so does count_tokens


def test_two_images_mid_conversation_give_llama_cpps_own_tokens(
        engine: Engine, vision_files: tuple[Path, Path, list[Path]], llama_server: str) -> None:
    pictures = vision_files[2][:2]
    assert tokens(engine, CONVERSATION, *pictures) == llama_cpp_tokens(llama_server, CONVERSATION, pictures)
    text, _, _ = run(engine, CONVERSATION, *pictures)
    assert text != run(engine, CONVERSATION, *reversed(pictures))[0]  # the images' order matters


def test_an_image_request_beside_text_requests_gives_the_same_text(engine: Engine, vision_files: tuple[Path, Path,
                                                                                                     list[Path]],
                                                                   llama_server: str) -> None:
    picture = vision_files[2][2]
    longer = SamplingOptions(temperature=0, num_predict=24, repeat_penalty=1.0, logprobs=True, top_logprobs=2)
    request = GenerateRequest(chat(f"{IMAGE_MARKER}describe"), longer, images=(picture.read_bytes(),))
    alone = collect(engine.submit(request))
    texts = [engine.submit(GenerateRequest(chat(f"story {i}"), SamplingOptions(temperature=0, num_predict=40,
                                                                               ignore_eos=True)))
             for i in range(4)]
    beside = collect(engine.submit(request))
    # Random weights tie now and then: where greedy's two best tokens are within float noise of each other
    # (under 1e-3 apart on a Zen 3 EPYC), a step beside other rows may pick the other one. Up to the first such
    # tie the text must be the same.
    tops = [lp.top for event in alone.tokens for lp in event.logprobs]
    tie = next((i for i, top in enumerate(tops) if len(top) > 1 and top[0][1] - top[1][1] < TIE), len(tops))
    assert tie >= 8 and beside.generated[:tie] == alone.generated[:tie]
    want = llama_cpp_tokens(llama_server, chat(f"{IMAGE_MARKER}describe"), [picture], n=24)
    assert want[:tie] == alone.generated[:tie]
    assert all(collect(t).done.eval_count == 40 for t in texts)


def test_a_follow_up_about_the_same_image_reuses_its_cells(engine: Engine,
                                                          vision_files: tuple[Path, Path, list[Path]]) -> None:
    picture, other = vision_files[2][0], vision_files[2][1]
    first = chat(f"{IMAGE_MARKER}first question")
    answer, prompt_tokens, _ = run(engine, first, picture)
    follow_up = (first + answer.decode(errors="replace")
                 + "<|im_end|>\n<|im_start|>user\nand then?<|im_end|>\n<|im_start|>assistant\n")
    encoded = engine.batcher.image_tokens  # type: ignore[union-attr]
    _, _, cached = run(engine, follow_up, picture)
    assert cached >= prompt_tokens - 1  # the first turn, image included, came from the prefix cache
    assert engine.batcher.image_tokens == encoded  # type: ignore[union-attr]  # not encoded again
    _, _, cached_other = run(engine, chat(f"{IMAGE_MARKER}first question"), other)
    image_at = engine.projector.tokenize(first, [other.read_bytes()], add_special=True).spans[0].start  # type: ignore[union-attr]
    assert cached_other <= image_at  # a different image shares no cells (the text before it, at most)


def test_images_are_refused_clearly(engine: Engine, vision_files: tuple[Path, Path, list[Path]],
                                    tiny_gguf: Path) -> None:
    picture = vision_files[2][0]
    with pytest.raises(InvalidRequest, match="2 image places for 1 images"):
        run(engine, chat(f"{IMAGE_MARKER}{IMAGE_MARKER}"), picture)
    with pytest.raises(InvalidRequest, match="image 1 could not be decoded"):
        collect(engine.submit(GenerateRequest(chat(f"{IMAGE_MARKER}x"), GREEDY, images=(b"\x89PNG\r\n\x1a\nbroken",))))
    closing = engine.projector.tokenize(f"look {IMAGE_MARKER}", [picture.read_bytes()], add_special=True)  # type: ignore[union-attr]
    if closing.spans[-1].end == len(closing.tokens):  # Qwen-VL's layouts close an image with text of their own
        with pytest.raises(InvalidRequest, match="ends with an image"):
            run(engine, f"look {IMAGE_MARKER}", picture)
    with pytest.raises(ContextOverflow):
        engine.submit(GenerateRequest(chat(f"{IMAGE_MARKER}" + " word" * 600), GREEDY, truncation=Truncation.FRONT,
                                      images=(picture.read_bytes(),)))
    with Engine(str(tiny_gguf), LoadOptions(num_ctx=128, num_parallel=1, num_batch=64)) as text_only:
        assert not text_only.info.vision
        with pytest.raises(UnsupportedCapability, match="does not support images"):
            text_only.submit(GenerateRequest(f"{IMAGE_MARKER} hi", GREEDY, images=(picture.read_bytes(),)))
    assert engine.info.vision
    assert run(engine, chat(f"{IMAGE_MARKER}still fine"), picture)[1] > 8  # nothing above broke it


def test_an_image_cached_on_disk_answers_after_a_reload_without_encoding_again(
        vision_files: tuple[Path, Path, list[Path]], tmp_path: Path) -> None:
    """The saved prefix cache keeps an image's cells (with M-RoPE: all at its first position, with
    their 2-D positions) and gives them back after a reload: same text, nothing encoded."""
    model, mmproj, pictures = vision_files
    options = LoadOptions(num_ctx=512, num_parallel=2, num_batch=64, projector=str(mmproj))
    where = PrefixCacheLocation(str(tmp_path), "sha256:vision")
    prompt = chat(f"{IMAGE_MARKER}what is this?")
    with Engine(str(model), options, prefix_cache=where) as first:
        before, prompt_tokens, _ = run(first, prompt, pictures[0])
    with Engine(str(model), options, prefix_cache=where) as second:
        after, _, cached = run(second, prompt, pictures[0])
        assert second.batcher.image_tokens == 0  # type: ignore[union-attr]
        second.batcher.kv.check_integrity()  # type: ignore[union-attr]
    assert after == before and cached == prompt_tokens - 1

"""engine/mtmd.py on a tiny random-weight vision model (tests/tinyvision.py): the projector loads, an
image becomes the chunks and embeddings libmtmd promises, bad bytes are refused, and a greedy
generation written here against the low-level API (image embeddings in a llama_batch) prints exactly
what llama.cpp's own ``llama-mtmd-cli`` prints on the same files."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import llama_cpp as lc
import numpy as np
import pytest
from tinyvision import IMAGE_TOKENS, N_EMBD, tiny_png_bytes, write_tiny_png, write_tiny_vision

from localrun.engine import mtmd, native
from localrun.engine.types import LoadOptions
from localrun.errors import EngineError, InvalidModelFile, InvalidRequest

MARKER = mtmd.default_marker()
# The prompt llama-mtmd-cli builds for `-p describe --image X` with the model's ChatML template (the
# tool puts the marker before the text when the prompt has none, and adds BOS to the first message).
CHATML_PROMPT = f"<|im_start|>user\n{MARKER}describe<|im_end|>\n<|im_start|>assistant\n"
N_PREDICT = 16
THREADS = 2


@dataclass
class Vision:
    folder: Path
    model_path: Path
    mmproj_path: Path
    model: lc.llama_model_p
    projector: mtmd.Projector
    vocab: native.Vocab


@pytest.fixture(scope="module")
def vision(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Vision]:
    folder = tmp_path_factory.mktemp("mtmd")
    model_path, mmproj_path = write_tiny_vision(folder)
    model = native.load_model(str(model_path), LoadOptions())
    projector = mtmd.Projector(mmproj_path, model, n_threads=THREADS)
    yield Vision(folder, model_path, mmproj_path, model, projector, native.Vocab(model))
    projector.close()
    lc.llama_model_free(model)


def image_chunk(chunks: list[mtmd.Chunk]) -> mtmd.ImageChunk:
    (image,) = [c for c in chunks if isinstance(c, mtmd.ImageChunk)]
    return image


def tokenize_one(vision: Vision, data: bytes, prompt: str = CHATML_PROMPT) -> list[mtmd.Chunk]:
    with vision.projector.load_image(data) as bitmap:
        return vision.projector.tokenize(prompt, [bitmap])


def test_the_projector_loads_for_the_model_and_says_what_it_needs(vision: Vision) -> None:
    p = vision.projector
    assert p.supports_vision
    assert not p.uses_mrope
    assert p.marker == MARKER == "<__media__>"
    assert p.n_embd == N_EMBD


def test_an_mmproj_for_another_model_is_refused_with_the_reason(vision: Vision, tmp_path: Path) -> None:
    from tinymodel import write_tiny_gguf
    other = write_tiny_gguf(tmp_path / "wide.gguf", n_embd=96, n_head=4, n_head_kv=2)
    model = native.load_model(str(other), LoadOptions())
    try:
        with pytest.raises(InvalidModelFile, match="mismatch between text model"):
            mtmd.Projector(vision.mmproj_path, model, n_threads=1)
        with pytest.raises(InvalidModelFile):
            mtmd.Projector(vision.model_path, model, n_threads=1)  # a language model is no mmproj
    finally:
        lc.llama_model_free(model)


def test_an_image_becomes_text_chunks_around_one_image_chunk(vision: Vision) -> None:
    chunks = tokenize_one(vision, tiny_png_bytes(40, 24, 1))
    kinds = [type(c).__name__ for c in chunks]
    assert kinds == ["TextChunk", "ImageChunk", "TextChunk"]
    first, image, last = chunks
    assert isinstance(first, mtmd.TextChunk) and isinstance(last, mtmd.TextChunk)
    assert isinstance(image, mtmd.ImageChunk)
    assert first.tokens[0] == vision.vocab.bos  # add_special: BOS opens the prompt
    assert list(first.tokens) == vision.vocab.tokenize("<|im_start|>user\n")
    assert list(last.tokens) == vision.vocab.tokenize("describe<|im_end|>\n<|im_start|>assistant\n",
                                                      add_special=False)
    # 32x32 after resizing, 8x8 patches: 16 embeddings, 16 positions (llama-mtmd-cli: "n_tokens_batch = 16")
    assert image.n_tokens == image.n_pos == IMAGE_TOKENS == 16
    assert not vision.projector.uses_non_causal(image)
    assert vision.projector.image_positions(image, 5).tolist() == list(range(5, 21))
    image.close()


def test_encoding_gives_finite_embeddings_of_the_models_width(vision: Vision) -> None:
    image = image_chunk(tokenize_one(vision, tiny_png_bytes(40, 24, 1)))
    with image:
        embd = vision.projector.encode(image)
        again = vision.projector.encode(image)
    assert embd.shape == (IMAGE_TOKENS, N_EMBD) and embd.dtype == np.float32
    assert np.isfinite(embd).all() and embd.std() > 0.1
    assert np.array_equal(embd, again)  # deterministic, and a copy the next encode does not overwrite


def test_the_same_bytes_give_the_same_id_and_other_images_other_ids(vision: Vision) -> None:
    a1 = image_chunk(tokenize_one(vision, tiny_png_bytes(40, 24, 1)))
    a2 = image_chunk(tokenize_one(vision, tiny_png_bytes(40, 24, 1)))
    b = image_chunk(tokenize_one(vision, tiny_png_bytes(40, 24, 2)))
    with a1, a2, b:
        assert a1.id == a2.id and len(a1.id) == 64  # sha256 hex of the encoded bytes
        assert b.id != a1.id
        assert not np.array_equal(vision.projector.encode(a1), vision.projector.encode(b))


@pytest.mark.parametrize("data, reason", [
    (b"", "not a PNG"),
    (b"garbage bytes, not an image", "not a PNG"),
    (b"RIFF\x24\x00\x00\x00WAVEfmt " + bytes(24), "not a PNG"),   # audio is not decoded as an image
    (b"\x00\x00\x00\x18ftypmp42" + bytes(64), "not a PNG"),        # nor video (libmtmd would start ffmpeg)
    (tiny_png_bytes(40, 24, 1)[:120], "could not be decoded"),      # truncated inside IDAT
    (b"\x89PNG\r\n\x1a\n" + bytes(40), "could not be decoded"),     # a PNG signature and nothing valid
    (b"\xff\xd8\xff\xe0" + bytes(100), "could not be decoded"),
])
def test_bytes_that_are_not_a_decodable_image_raise_invalid_request(vision: Vision, data: bytes, reason: str) -> None:
    with pytest.raises(InvalidRequest, match=reason):
        vision.projector.load_image(data)


def test_markers_and_images_must_pair_up(vision: Vision) -> None:
    with vision.projector.load_image(tiny_png_bytes(40, 24, 1)) as bitmap:
        with pytest.raises(InvalidRequest, match="0 image marker"):
            vision.projector.tokenize("no marker here", [bitmap])
        with pytest.raises(InvalidRequest, match="2 image marker"):
            vision.projector.tokenize(f"{MARKER} and {MARKER}", [bitmap])
        assert len(vision.projector.tokenize(f"{MARKER} and {MARKER}", [bitmap, bitmap])) == 4
    with pytest.raises(EngineError, match="used after close"):
        vision.projector.tokenize(MARKER, [bitmap])


# --- the strongest check: our own greedy generation against llama-mtmd-cli -------------------------


def greedy_with_image(vision: Vision, prompt: str, image: bytes, n_predict: int) -> list[int]:
    """Decode ``prompt`` with ``image`` the way llama-mtmd-cli does (each chunk its own llama_decode,
    logits only for the prompt's last token), then take the argmax ``n_predict`` times."""
    # the tool's context: n_ctx from the model (2048), -b 2048, -ub 512, flash attention auto, F16 KV
    ctx = native.create_context(vision.model, native.ContextSpec(
        n_ctx=2048, n_seq_max=1, n_batch=2048, n_threads=THREADS, swa_full=False))
    text = native.Batch(512)
    embd_batch = lc.llama_batch_init(IMAGE_TOKENS, N_EMBD, 1)
    try:
        chunks = tokenize_one(vision, image, prompt)
        n_past = 0
        for i, chunk in enumerate(chunks):
            last = i == len(chunks) - 1
            if isinstance(chunk, mtmd.TextChunk):
                text.clear()
                text.add(0, n_past, list(chunk.tokens), want_last_logits=last)
                assert text.decode(ctx) == 0
                n_past += chunk.n_pos
                continue
            with chunk:
                embd = vision.projector.encode(chunk)
                positions = vision.projector.image_positions(chunk, n_past)
                n = chunk.n_tokens
                ctypes.memmove(embd_batch.embd, embd.ctypes.data, embd.nbytes)
                for j in range(n):
                    embd_batch.pos[j] = int(positions[j])
                    embd_batch.n_seq_id[j] = 1
                    embd_batch.seq_id[j][0] = 0
                    embd_batch.logits[j] = 0
                embd_batch.n_tokens = n
                assert lc.llama_decode(ctx, embd_batch) == 0
                n_past += chunk.n_pos
        out: list[int] = []
        for _ in range(n_predict):
            logits = np.ctypeslib.as_array(lc.llama_get_logits_ith(ctx, -1), shape=(vision.vocab.n_vocab,))
            token = int(np.argmax(logits))
            if lc.llama_vocab_is_eog(vision.vocab.ptr, token):
                break
            out.append(token)
            text.clear()
            text.add_one(0, n_past, token)
            assert text.decode(ctx) == 0
            n_past += 1
        return out
    finally:
        lc.llama_batch_free(embd_batch)
        lc.llama_free(ctx)


def printed(vision: Vision, tokens: list[int]) -> bytes:
    """What llama-mtmd-cli prints for ``tokens`` (common_token_to_piece: special tokens as text)."""
    out = b""
    for t in tokens:
        buf = ctypes.create_string_buffer(256)
        n = lc.llama_token_to_piece(vision.vocab.ptr, t, buf, len(buf), 0, True)
        out += buf.raw[:n]
    return out


def mtmd_cli_binary() -> str:
    binary = os.environ.get("LLAMA_MTMD_CLI") or shutil.which("llama-mtmd-cli") or next(
        (str(p) for p in Path("/tmp/llama-server").glob("*/vendor/llama.cpp/build/bin/llama-mtmd-cli")), None)
    if binary is None:
        pytest.skip("needs llama.cpp's llama-mtmd-cli (../shared/bench/build_llama_server.sh; or LLAMA_MTMD_CLI=path)")
    return binary


def mtmd_cli(vision: Vision, image: Path, n_predict: int) -> bytes:
    """llama-mtmd-cli's greedy answer to "describe" about ``image``: the bytes it prints between its own
    leading newline and trailing blank line.

    Its logger prints from a worker thread and is never joined at exit (llama.cpp issue 22142): about
    1 run in 10-15 prints nothing after loading the model. The perf summary is logged after the answer through the
    same queue, so a run whose stderr has it printed the whole answer; others are run again."""
    binary = mtmd_cli_binary()
    args = [binary, "-m", str(vision.model_path), "--mmproj", str(vision.mmproj_path), "--image", str(image),
            "-p", "describe", "-n", str(n_predict), "--temp", "0", "-t", str(THREADS), "--no-warmup",
            "-v"]  # -v: the perf summary below is logged at a level hidden by default
    env = {**os.environ, "LD_LIBRARY_PATH": str(Path(binary).parent)}
    for _ in range(5):
        run = subprocess.run(args, capture_output=True, timeout=60, env=env, check=True)
        if b"llama_perf_context_print" in run.stderr:
            assert run.stdout.startswith(b"\n") and run.stdout.endswith(b"\n\n"), run.stdout
            return run.stdout[1:-2]
    pytest.fail("llama-mtmd-cli never printed its whole output in 5 runs")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_greedy_generation_with_an_image_prints_what_llama_mtmd_cli_prints(vision: Vision, seed: int) -> None:
    image = write_tiny_png(vision.folder / f"cli{seed}.png", 40 + 8 * seed, 24, seed)
    ours = greedy_with_image(vision, CHATML_PROMPT, image.read_bytes(), N_PREDICT)
    theirs = mtmd_cli(vision, image, N_PREDICT)
    assert len(ours) == N_PREDICT  # no end-of-generation token in 16 steps (the tool would print one more newline)
    assert printed(vision, ours) == theirs


def test_the_image_changes_the_answer(vision: Vision) -> None:
    # otherwise the comparison above would hold for a projector whose output the model ignores
    answers = {bytes(printed(vision, greedy_with_image(vision, CHATML_PROMPT, tiny_png_bytes(40, 24, s), 8)))
               for s in (1, 2, 3)}
    assert len(answers) == 3

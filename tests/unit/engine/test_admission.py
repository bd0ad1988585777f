"""Admission to the shared KV pool and the choice of the request that pauses (engine/admission.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from localrun.engine import admission
from localrun.engine.admission import GROWTH_RESERVE


@dataclass
class Seq:
    """The fields admission reads, as a running or waiting engine Sequence has them."""

    prompt: int
    n_past: int = 0
    generated: int = 0
    num_ctx: int = 32768
    num_predict: int | None = None
    interactive: bool = False
    t_admit: float = 0.0
    resume_decode: bool = False
    tokens: list[int] = field(default_factory=list)
    image_at: int = 0       # an M-RoPE image there takes ``image_extra`` cells beyond its positions
    image_extra: int = 0

    def __post_init__(self) -> None:
        self.tokens = [0] * (self.prompt + self.generated)

    def extra_cells_from(self, index: int) -> int:
        return self.image_extra if self.image_at >= index else 0

    @property
    def prefill_end(self) -> int:
        return len(self.tokens) - 1 if self.resume_decode else self.prompt


def test_a_running_request_keeps_room_for_its_prompt_and_a_short_run_of_output() -> None:
    assert admission.still_needs(Seq(prompt=1000, n_past=200)) == 800 + GROWTH_RESERVE
    assert admission.still_needs(Seq(prompt=1000, n_past=1000, num_predict=10)) == 10  # never past its limits
    assert admission.still_needs(Seq(prompt=4090, n_past=4090, num_ctx=4096)) == 6


def test_nothing_running_admits_anything_the_engine_accepted() -> None:
    assert admission.fits(Seq(prompt=30000), cached=0, reclaimable=0, running=[])


def test_a_request_waits_while_the_pool_cannot_hold_it_beside_the_running_ones() -> None:
    running = [Seq(prompt=20000, n_past=20000)]  # an agent's turn, generating
    newcomer = Seq(prompt=20000)
    room = 65536 - 20000
    assert admission.fits(newcomer, cached=0, reclaimable=room, running=running)
    assert not admission.fits(newcomer, cached=0, reclaimable=20000, running=running)
    # a cached prefix needs no new cells
    assert admission.fits(newcomer, cached=19900, reclaimable=20000 - 19900 + 2 * GROWTH_RESERVE, running=running)


def test_the_request_that_pauses_is_batch_work_first_then_the_newest() -> None:
    chat_old = Seq(prompt=10, interactive=True, t_admit=1.0)
    chat_new = Seq(prompt=10, interactive=True, t_admit=5.0)
    batch_old = Seq(prompt=10, t_admit=2.0)
    batch_new = Seq(prompt=10, t_admit=3.0)
    assert admission.victim([chat_old, chat_new, batch_old, batch_new]) is batch_new
    assert admission.victim([chat_old, chat_new]) is chat_new


def test_an_image_with_more_cells_than_positions_needs_its_cells() -> None:
    """M-RoPE (Qwen2-VL): an image's h x w embeddings take max(h, w) positions but h x w cells."""
    running = [Seq(prompt=100, n_past=100, generated=1)]
    room = admission.headroom(running[0]) + 200 + admission.headroom(Seq(prompt=200))
    assert admission.fits(Seq(prompt=200), 0, room, running)
    assert not admission.fits(Seq(prompt=200, image_at=50, image_extra=60), 0, room, running)
    assert admission.fits(Seq(prompt=200, image_at=50, image_extra=60), 60, room, running)  # the image is cached

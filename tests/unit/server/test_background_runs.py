"""The registry of background responses: events read as they come, the ended runs it keeps, cancelling."""

from __future__ import annotations

import asyncio

from localrun.jsontypes import JSONObject
from localrun.server.responses.background import BackgroundRun, BackgroundRuns


class Writer:
    def __init__(self, response_id: str) -> None:
        self.response: JSONObject = {"id": response_id, "status": "queued"}

    def current(self) -> JSONObject:
        return dict(self.response)


def event(n: int) -> tuple[str, JSONObject]:
    return "response.output_text.delta", {"sequence_number": n}


async def test_a_reader_gets_what_was_written_then_each_new_event_until_the_end() -> None:
    run = BackgroundRun(Writer("resp_1"))
    run.add([event(0), event(1)])
    seen: list[int] = []

    async def read(after: int) -> None:
        async for _, data in run.tail(after):
            seen.append(int(str(data["sequence_number"])))

    readers = [asyncio.create_task(read(0)), asyncio.create_task(read(-1))]
    await asyncio.sleep(0)
    run.add([event(2)])
    await asyncio.sleep(0)
    run.add([event(3)])
    run.end()
    await asyncio.gather(*readers)
    assert sorted(seen) == [0, 1, 1, 2, 2, 3, 3]
    assert [int(str(d["sequence_number"])) async for _, d in run.tail(2)] == [3]  # ended: no wait


async def test_ended_runs_beyond_the_bound_are_dropped_oldest_first_and_running_ones_never() -> None:
    runs = BackgroundRuns(max_ended=2)
    gate = asyncio.Event()

    async def work(run: BackgroundRun, wait: bool) -> None:
        if wait:
            await gate.wait()
        run.end()

    slow = BackgroundRun(Writer("resp_slow"))
    runs.start(slow, work(slow, True))
    quick = [BackgroundRun(Writer(f"resp_{i}")) for i in range(4)]
    for run in quick:
        runs.start(run, work(run, False))
        await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert [r.id for r in quick if runs.get(r.id) is not None] == ["resp_2", "resp_3"]
    assert runs.get("resp_slow") is slow and not slow.ended
    gate.set()
    await asyncio.sleep(0)
    assert runs.get("resp_slow") is slow  # the newest ended one now: resp_2 went
    assert runs.get("resp_2") is None and runs.get("resp_3") is not None


async def test_cancel_waits_for_the_run_to_record_it_and_close_cancels_what_still_runs() -> None:
    runs = BackgroundRuns()
    cancelled: list[str] = []

    async def work(run: BackgroundRun) -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.append(run.id)
            run.encoder.response["status"] = "cancelled"
        finally:
            run.end()

    one, two = BackgroundRun(Writer("resp_a")), BackgroundRun(Writer("resp_b"))
    runs.start(one, work(one))
    runs.start(two, work(two))
    await asyncio.sleep(0)
    await runs.cancel(one)
    assert one.ended and one.encoder.response["status"] == "cancelled" and not two.ended
    await runs.cancel(one)  # again: nothing happens
    await runs.close()
    assert cancelled == ["resp_a", "resp_b"] and two.ended

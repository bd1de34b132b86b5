"""Which waiting batch gets the next free decode worker: the one the consumer
needs first (lowest rank), whatever order the batches came in."""

from __future__ import annotations

import anyio
import pytest

from streamer.pipeline.turns import Turns

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def _hold(turns: Turns, until: anyio.Event) -> None:
    async with turns.turn(0):
        await until.wait()


async def _take(turns: Turns, rank: int, name: str, order: list[str]) -> None:
    """Wait for a place at ``rank``, then note ``name`` in ``order``."""
    async with turns.turn(rank):
        order.append(name)
        await anyio.sleep(0)


async def _queue(turns: Turns, arrivals: list[tuple[int, str]]) -> list[str]:
    """Names in the order they got a place, ``arrivals`` queued behind a held
    place in the order given (each waiting before the next arrives)."""
    order: list[str] = []
    held = anyio.Event()
    async with anyio.create_task_group() as group:
        group.start_soon(_hold, turns, held)
        await anyio.wait_all_tasks_blocked()
        for rank, name in arrivals:
            group.start_soon(_take, turns, rank, name, order)
            await anyio.wait_all_tasks_blocked()
        assert order == []  # nothing passes the held place
        held.set()
    return order


async def test_the_lowest_rank_goes_first_then_the_first_to_come() -> None:
    arrivals = [(8, "8"), (4, "4a"), (12, "12"), (4, "4b"), (0, "0")]
    assert await _queue(Turns(1), arrivals) == ["0", "4a", "4b", "8", "12"]


async def test_a_free_place_is_taken_at_once_and_every_place_is_used() -> None:
    turns = Turns(2)
    inside = 0
    most = 0

    async def use(rank: int) -> None:
        nonlocal inside, most
        async with turns.turn(rank):
            inside += 1
            most = max(most, inside)
            await anyio.sleep(0.01)
            inside -= 1

    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            for rank in range(7):
                group.start_soon(use, rank)
    assert most == 2 and inside == 0


async def test_a_waiter_cancelled_before_its_turn_is_skipped() -> None:
    turns = Turns(1)
    order: list[str] = []
    held = anyio.Event()
    async with anyio.create_task_group() as group:
        group.start_soon(_hold, turns, held)
        await anyio.wait_all_tasks_blocked()
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as doomed:
                doomed.start_soon(_take, turns, 1, "cancelled", order)
                await anyio.wait_all_tasks_blocked()
                scope.cancel()
        group.start_soon(_take, turns, 2, "next", order)
        await anyio.wait_all_tasks_blocked()
        held.set()
    assert order == ["next"]
    with anyio.fail_after(5):
        async with turns.turn(0):  # the place came back
            pass


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_place_granted_to_a_cancelled_waiter_passes_on() -> None:
    """Granted, then cancelled before it ran: the place goes to the next in
    line. (asyncio only: it can cancel a task already woken, before it runs.)"""
    import asyncio

    turns = Turns(1)
    order: list[str] = []
    with anyio.fail_after(5):
        held = turns.turn(0)
        await held.__aenter__()
        doomed = asyncio.create_task(_take(turns, 1, "granted, then cancelled", order))
        later = asyncio.create_task(_take(turns, 2, "next", order))
        await anyio.wait_all_tasks_blocked()
        await held.__aexit__(None, None, None)  # rank 1 is granted the place...
        doomed.cancel()  # ...and cancelled before it runs
        await asyncio.gather(doomed, later, return_exceptions=True)
        assert doomed.cancelled() and order == ["next"]
        async with turns.turn(0):  # the place came back
            pass

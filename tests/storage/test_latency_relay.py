"""The benchmarks' latency relay (``testkit.relay``): every request waits the
delay once, over new and kept-alive connections, and bytes pass unchanged."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import aiohttp

from testkit.relay import LatencyRelay
from testkit.servers import LoopbackServer, file_handler

DELAY = 0.2


def test_each_request_waits_the_delay_once_and_bytes_pass_unchanged(tmp_path: Path) -> None:
    blob = os.urandom(3 << 20)
    (tmp_path / "blob").write_bytes(blob)
    server = LoopbackServer(file_handler(tmp_path)).start()
    relay = LatencyRelay("127.0.0.1", server.port, DELAY).start()

    async def fetch(session: aiohttp.ClientSession, first: int, last: int) -> tuple[float, bytes]:
        began = time.monotonic()
        headers = {"Range": f"bytes={first}-{last}"}
        async with session.get(f"{relay.url}/blob", headers=headers) as answer:
            assert answer.status == 206
            return time.monotonic() - began, await answer.read()

    async def main() -> list[tuple[float, bytes]]:
        connector = aiohttp.TCPConnector(limit=1)  # one kept-alive connection, in turn
        async with aiohttp.ClientSession(connector=connector) as session:
            one_by_one = [await fetch(session, 0, len(blob) - 1), await fetch(session, 5, 104)]
        async with aiohttp.ClientSession() as session:  # eight at once, new connections
            together = await asyncio.gather(*(fetch(session, n, n + 9999) for n in range(8)))
        return [*one_by_one, *together]

    try:
        results = asyncio.run(main())
    finally:
        relay.stop()
        server.stop()
    assert results[0][1] == blob and results[1][1] == blob[5:105]
    assert all(data == blob[n : n + 10000] for n, (_, data) in enumerate(results[2:]))
    assert all(DELAY <= seconds < DELAY + 1.5 for seconds, _ in results)

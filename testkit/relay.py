"""Network latency for benchmarks, added below HTTP: a TCP relay on loopback.

``LatencyRelay`` accepts connections on 127.0.0.1 and relays each to an
upstream server, holding every chunk a client sends for ``delay`` seconds
before passing it on (chunks keep their order and are held concurrently,
so a request waits ``delay`` once however it is split), while answers flow
back at once. A request over a kept-alive connection therefore waits one
``delay``, as over a link with that round-trip time.

Why not ``servers.proxy_handler`` with ``Faults.latency``: that proxy parses
every request and answer as HTTP and builds them again in Python, which on
the benchmark's own cores cost about as much CPU as decoding the crop it
carries; the relay only copies bytes, so a benchmark measures the client
and the store, not the harness. Nothing here reads or changes a request (a
signed ``Host`` header stays what the client signed).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

__all__ = ["LatencyRelay"]

#: Bytes read from a socket at a time.
_CHUNK = 1 << 18


class LatencyRelay:
    """A TCP relay to ``host:port`` that delays what clients send by ``delay`` s."""

    def __init__(self, host: str, port: int, delay: float) -> None:
        self.upstream = (host, port)
        self.delay = delay
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> LatencyRelay:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result()
        return self

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def _relay(
        self, client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            server_in, server_out = await asyncio.open_connection(*self.upstream)
        except OSError:
            client_out.close()
            self._tasks.discard(task)
            return
        try:
            await asyncio.gather(
                self._delayed(client_in, server_out), self._pump(server_in, client_out)
            )
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            for writer in (client_out, server_out):
                writer.close()
            self._tasks.discard(task)

    async def _delayed(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        """Pass each chunk on ``delay`` s after it arrived, in order."""
        held: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def release() -> None:
            while True:
                due, data = await held.get()
                if not data:
                    break
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                sink.write(data)
                await sink.drain()
            with contextlib.suppress(OSError):
                sink.write_eof()

        releasing = asyncio.ensure_future(release())
        try:
            while True:
                data = await source.read(_CHUNK)
                held.put_nowait((time.monotonic() + self.delay, data))
                if not data:
                    break
            await releasing
        finally:
            releasing.cancel()

    @staticmethod
    async def _pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        """Pass answers back as they come."""
        while data := await source.read(_CHUNK):
            sink.write(data)
            await sink.drain()
        with contextlib.suppress(OSError):
            sink.write_eof()

"""Client CPU per ranged S3 GET: which library streamer's S3 requests go through.

One decode pipeline's parent process fetches for all its workers, so the
client CPU of one request caps a whole node's request rate. This runs the
same ranged GETs (``--gets`` of ``--size`` KiB, ``--in-flight`` at once, at
distinct offsets of one object) against a real S3 server on loopback
(SeaweedFS, which reads only the asked range; moto reads the whole object)
through each candidate client, in rounds that alternate the clients, and
reports the client CPU per GET (this process's user + system time, every
thread included: a library doing its I/O on threads of its own pays here
too; the server is a child process and is not counted):

* ``aiobotocore``: ``get_object(Range=...)`` and a read of the body;
* ``s3fs``: ``S3FileSystem._cat_file`` (fsspec over aiobotocore);
* ``obstore``: ``get_range_async`` (Rust ``object_store``, I/O off the GIL);
* ``presigned+aiohttp``: a URL presigned by botocore, fetched by aiohttp;
* ``streamer``: ``S3Store`` readers (``fetch_many_sync``), the whole request
  path with retries, timeouts, hedges, the outage gate and stats.

    python -m benchmarks.bench_s3_client [--gets 400] [--in-flight 16] [--size 256]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import resource
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta

import numpy as np

from benchmarks._report import write_json
from testkit import s3servers
from testkit.servers import upload_tree

BUCKET = "bench"
KEY = "object.bin"
KEY_ID, SECRET = "bench", "bench-secret"
REGION = "us-east-1"

Fetch = Callable[[int, int], Awaitable[bytes]]


def cpu() -> float:
    """User + system CPU seconds of this process, all its threads."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def run_gets(fetch: Fetch, offsets: list[int], size: int, in_flight: int) -> None:
    limit = asyncio.Semaphore(in_flight)

    async def one(offset: int) -> None:
        async with limit:
            body = await fetch(offset, size)
        if len(body) != size:
            raise RuntimeError(f"{len(body)} bytes instead of {size} at {offset}")

    await asyncio.gather(*(one(o) for o in offsets))


class Aiobotocore:
    name = "aiobotocore"

    async def __aenter__(self) -> Fetch:
        from aiobotocore.session import get_session
        from botocore.config import Config

        config = Config(max_pool_connections=64, retries={"total_max_attempts": 1})
        self._context = get_session().create_client(
            "s3",
            endpoint_url=ENDPOINT,
            aws_access_key_id=KEY_ID,
            aws_secret_access_key=SECRET,
            region_name=REGION,
            config=config,
        )
        client = await self._context.__aenter__()

        async def fetch(offset: int, size: int) -> bytes:
            answer = await client.get_object(
                Bucket=BUCKET, Key=KEY, Range=f"bytes={offset}-{offset + size - 1}"
            )
            async with answer["Body"] as body:
                return await body.read()

        return fetch

    async def __aexit__(self, *exc: object) -> None:
        await self._context.__aexit__(None, None, None)


class S3fs:
    name = "s3fs"

    async def __aenter__(self) -> Fetch:
        import s3fs

        self._fs = s3fs.S3FileSystem(
            key=KEY_ID,
            secret=SECRET,
            endpoint_url=ENDPOINT,
            client_kwargs={"region_name": REGION},
            asynchronous=True,
            skip_instance_cache=True,
            config_kwargs={"max_pool_connections": 64},
        )
        self._session = await self._fs.set_session()

        async def fetch(offset: int, size: int) -> bytes:
            return await self._fs._cat_file(f"{BUCKET}/{KEY}", start=offset, end=offset + size)

        return fetch

    async def __aexit__(self, *exc: object) -> None:
        await self._session.close()


class Obstore:
    name = "obstore"

    async def __aenter__(self) -> Fetch:
        import obstore
        from obstore.store import S3Store

        store = S3Store(
            BUCKET,
            endpoint=ENDPOINT,
            access_key_id=KEY_ID,
            secret_access_key=SECRET,
            region=REGION,
            client_options={"allow_http": True},
            retry_config={"max_retries": 0, "retry_timeout": timedelta(seconds=30)},
        )

        async def fetch(offset: int, size: int) -> bytes:
            return await obstore.get_range_async(store, KEY, start=offset, length=size)

        return fetch

    async def __aexit__(self, *exc: object) -> None:
        return None


class Presigned:
    name = "presigned+aiohttp"

    async def __aenter__(self) -> Fetch:
        import aiohttp
        import botocore.session

        self._client = botocore.session.get_session().create_client(
            "s3",
            endpoint_url=ENDPOINT,
            aws_access_key_id=KEY_ID,
            aws_secret_access_key=SECRET,
            region_name=REGION,
        )
        self._http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64))

        async def fetch(offset: int, size: int) -> bytes:
            url = self._client.generate_presigned_url(
                "get_object", Params={"Bucket": BUCKET, "Key": KEY}, ExpiresIn=300
            )
            headers = {"Range": f"bytes={offset}-{offset + size - 1}"}
            async with self._http.get(url, headers=headers) as answer:
                return await answer.read()

        return fetch

    async def __aexit__(self, *exc: object) -> None:
        await self._http.close()
        self._client.close()


class PresignedOnce(Presigned):
    """One presigned URL per object, reused by every ranged GET of it (the
    signature covers the host alone: ``Range`` is not signed)."""

    name = "presigned-once+aiohttp"

    async def __aenter__(self) -> Fetch:
        await super().__aenter__()
        url = self._client.generate_presigned_url(
            "get_object", Params={"Bucket": BUCKET, "Key": KEY}, ExpiresIn=3600
        )

        async def fetch(offset: int, size: int) -> bytes:
            headers = {"Range": f"bytes={offset}-{offset + size - 1}"}
            async with self._http.get(url, headers=headers) as answer:
                return await answer.read()

        return fetch


def streamer_path(offsets: list[int], size: int, in_flight: int) -> float:
    """CPU seconds of the GETs through ``S3Store`` (blocking API, store loop)."""
    from streamer.storage.loop import run_sync
    from streamer.storage.s3 import S3Store

    store = S3Store(
        "s3",
        {
            "endpoint_url": ENDPOINT,
            "key": KEY_ID,
            "secret": SECRET,
            "region_name": REGION,
            "max_concurrency": in_flight,
        },
    )
    reader = store.reader(f"{BUCKET}/{KEY}")
    reader.size_sync()
    reader.fetch_many_sync([(offsets[-1], size)])  # connect
    store.stats.reset()
    gc.collect()  # the garbage of the clients measured before is not this one's cost
    began = cpu()
    reader.fetch_many_sync([(o, size) for o in offsets[:-1]])
    spent = cpu() - began
    if store.stats.requests < len(offsets) - 1:  # ranges merged: not one GET each
        raise RuntimeError(f"{store.stats.requests} requests for {len(offsets) - 1} ranges")
    run_sync(store._close_on_loop())
    return spent / (len(offsets) - 1)


async def library(client: type, offsets: list[int], size: int, in_flight: int) -> float:
    async with client() as fetch:
        await run_gets(fetch, offsets[:in_flight], size, in_flight)  # connect, warm up
        gc.collect()  # the garbage of the clients measured before is not this one's cost
        began = cpu()
        await run_gets(fetch, offsets[in_flight:], size, in_flight)
        return (cpu() - began) / (len(offsets) - in_flight)


def distinct_offsets(rng: np.random.Generator, total: int, size: int, count: int) -> list[int]:
    """``count`` offsets of ``size``-byte ranges in random order, far enough
    apart that streamer never merges two into one request."""
    slot = size + 16 * 1024
    if count * slot > total:
        raise SystemExit(f"--object-mb too small for {count} distinct GETs")
    return [int(i) * slot for i in rng.choice(total // slot, count, replace=False)]


def main() -> None:
    global ENDPOINT
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gets", type=int, default=400)
    parser.add_argument("--in-flight", type=int, default=16)
    parser.add_argument("--size", type=int, default=256, help="KiB per GET")
    parser.add_argument("--object-mb", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--clients",
        default="aiobotocore,s3fs,obstore,presigned+aiohttp,presigned-once+aiohttp,streamer",
        help="comma-separated subset",
    )
    args = parser.parse_args()
    size = args.size << 10
    clients = {c.name: c for c in (Aiobotocore, S3fs, Obstore, Presigned, PresignedOnce)}
    chosen = args.clients.split(",")
    with tempfile.TemporaryDirectory() as folder:
        server = s3servers.start("seaweedfs", f"{folder}/server", KEY_ID, SECRET)
        try:
            ENDPOINT = server.url
            data = f"{folder}/upload"
            os.makedirs(data)
            with open(f"{data}/{KEY}", "wb") as file:
                file.write(np.random.default_rng(0).bytes(args.object_mb << 20))
            upload_tree(server.url, data, BUCKET, "", KEY_ID, SECRET)
            rng = np.random.default_rng(1)
            per_get: dict[str, list[float]] = {name: [] for name in chosen}
            skipped: set[str] = set()
            for _ in range(args.rounds):
                for name in chosen:
                    offsets = distinct_offsets(rng, args.object_mb << 20, size, args.gets)
                    began = time.perf_counter()
                    if name in skipped:
                        continue
                    if name == "streamer":
                        spent = streamer_path(offsets, size, args.in_flight)
                    else:
                        try:
                            spent = asyncio.run(
                                library(clients[name], offsets, size, args.in_flight)
                            )
                        except ImportError as exc:  # s3fs, obstore: not dependencies
                            print(f"  {name:<22} skipped: {exc}", flush=True)
                            skipped.add(name)
                            continue
                    per_get[name].append(spent)
                    print(
                        f"  {name:<22} {spent * 1e3:6.3f} ms CPU/GET "
                        f"({time.perf_counter() - began:.2f} s wall)",
                        flush=True,
                    )
        finally:
            server.stop()
    print(
        f"\n{args.gets} ranged GETs of {args.size} KiB, {args.in_flight} in flight, "
        f"SeaweedFS on loopback; client CPU per GET, median of {args.rounds} rounds:"
    )
    chosen = [name for name in chosen if per_get[name]]
    base = statistics.median(per_get[chosen[0]])
    for name in chosen:
        median = statistics.median(per_get[name])
        spread = f"{min(per_get[name]) * 1e3:.3f}-{max(per_get[name]) * 1e3:.3f}"
        print(
            f"  {name:<22} {median * 1e3:6.3f} ms  ({spread})  x{median / base:.2f} of {chosen[0]}"
        )
    write_json(
        "bench_s3_client",
        {"parameters": vars(args), "cpu_per_get_seconds": per_get},
    )


ENDPOINT = ""

if __name__ == "__main__":
    main()

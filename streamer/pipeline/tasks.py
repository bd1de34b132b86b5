"""What one decode worker gets and gives back: small, picklable messages.

A ``Task`` carries a planned crop (``CropJob``, whose episode holds the
blob's address) and, for remote shards, the bytes the plan needs up front
(``Fetched``). For a local shard no audio bytes travel: the worker maps the
shard file itself and reads the planned ranges out of its own mapping. The
decoded crop comes back through the pool's shared memory (``arena.py``) when
the task carries a region of it, else through the pipe.
``run`` is the same function in a worker process and in-process
(``workers=0``).
"""

from __future__ import annotations

import dataclasses
import io
import logging
import pickle
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from mmap import mmap
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler
from typing import TYPE_CHECKING, Any

import numpy as np

from ..decode.crop import Crop, CropJob, decode_fallback, decode_job, fetch, read_deferred
from ..errors import StorageError, StreamerError, WorkerError
from ..formats.job import DecodeStats, Fetched, Pieces
from ..storage.retry import StoreUnavailable

if TYPE_CHECKING:
    from .arena import Arena, Lease

__all__ = [
    "Failure",
    "Sealed",
    "Task",
    "attempt",
    "end_if_store_gave_up",
    "failure_of",
    "first_error",
    "run",
    "seal",
    "ship",
    "unseal",
    "unshipped",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Task:
    """One crop to decode. ``fetched`` is None when the worker reads the bytes
    itself (a mapped local shard, or the fallback's whole-blob decode).
    ``region`` (offset, capacity) is where in the pool's shared memory the
    worker writes the crop, if it fits."""

    job: CropJob
    fetched: Fetched | None = None
    region: tuple[int, int] | None = None
    #: ``fetched``'s pieces as ``(blob offset, arena offset, length)`` when
    #: the parent put them in the pool's shared memory (``ship``); the task
    #: then travels without them (``fetched`` is None) and ``unshipped``
    #: gets them back.
    shipped: tuple[tuple[int, int, int], ...] | None = None


@dataclass(frozen=True)
class Failure:
    """Why a crop failed: ``reason`` is the exception's class name (what
    ``Streamer.stats`` counts), ``message`` its text, ``exception`` the
    exception itself, ``key`` and ``shard`` where (when known).

    ``storage`` says the store failed to deliver the bytes (a
    ``StorageError``, after the store's own retries): that is not the crop's
    fault, so the Streamer raises it even under ``on_error="skip"`` instead
    of counting a store outage as bad data. Every other exception is a
    failure of that crop's data.

    A failure sent to another process takes its exception along when the
    exception pickles (``DataError`` and the other ``streamer.errors`` do, with
    their fields); when it does not, ``error()`` over there is a
    ``WorkerError`` naming the class.
    """

    reason: str
    message: str
    key: str | None = None
    exception: BaseException | None = field(default=None, compare=False, repr=False)
    shard: str | None = None
    storage: bool = False

    @classmethod
    def of(cls, exc: BaseException, key: str | None, shard: str | None = None) -> Failure:
        storage = isinstance(exc, StorageError)
        return cls(type(exc).__name__, str(exc), key, exc, shard, storage)

    @property
    def store_gave_up(self) -> bool:
        """Whether the store failed for its whole time budget (``StoreUnavailable``):
        the pass then ends at once, not when the consumer reaches this crop
        (``end_if_store_gave_up``)."""
        return isinstance(self.exception, StoreUnavailable)

    def error(self) -> BaseException:
        """The exception to raise for ``on_error="raise"``, or for a storage
        failure, noted with the episode it was reading (a store's message
        names the object and the byte range, not the key): tracebacks show
        the note, and so does the CLI's error line."""
        if self.exception is None:
            return WorkerError(self.reason, self.message)
        if self.storage and self.key is not None:
            note = f"reading key {self.key!r} (shard {self.shard})"
            if note not in getattr(self.exception, "__notes__", ()):
                self.exception.add_note(note)
        return self.exception

    def __reduce__(self) -> tuple[object, ...]:
        fields = (self.reason, self.message, self.key, _pickled(self.exception))
        return _failure, (*fields, self.shard, self.storage)


def _pickled(exc: BaseException | None) -> bytes | None:
    """``exc`` pickled, or None when it cannot travel: some exceptions pickle
    but fail to unpickle (a constructor that wants other arguments than
    ``args``), so the round trip is tried here, in the sender."""
    if exc is None:
        return None
    try:
        data = pickle.dumps(exc)
        pickle.loads(data)
    except Exception as problem:
        log.debug("%s does not pickle (%s); sending its text", type(exc).__name__, problem)
        return None
    return data


def _failure(
    reason: str,
    message: str,
    key: str | None,
    pickled: bytes | None,
    shard: str | None,
    storage: bool,
) -> Failure:
    exc = None
    if pickled is not None:
        try:  # its class may not import here
            exc = pickle.loads(pickled)
        except Exception:
            exc = None
    return Failure(reason, message, key, exc, shard, storage)


#: What a worker sends its parent to ask for a task's deferred ranges.
ASK_HELD_BACK = "held-back"


def run(
    task: Task, stats: DecodeStats, ask: Callable[[], Pieces] | None = None, *, copy: bool = False
) -> Crop:
    """Decode the task's crop (reading a local shard's planned bytes from the
    mapping, or copies of them with ``copy``: the in-process decode, which
    a fault in the mapping would kill, ``decode.crop.fetch``). The deferred
    ranges of shipped bytes come from ``ask()`` (the parent) when given,
    else from the blob."""
    job = task.job
    if job.plan is None:
        return decode_fallback(job, stats)
    # A crop bound for shared memory is copied there: no contiguous copy before.
    contiguous = task.region is None
    if task.fetched is None:
        deferred = partial(read_deferred, job, copy=copy)
        return decode_job(
            job, fetch(job, copy=copy), stats, held_back=deferred, contiguous=contiguous
        )
    return decode_job(job, task.fetched, stats, held_back=ask, contiguous=contiguous)


def attempt(
    task: Task, ask: Callable[[], Pieces] | None = None, *, copy: bool = False
) -> tuple[Crop | Failure, DecodeStats]:
    """``run``, with any failure turned into a ``Failure`` (a bad crop must not end a worker)."""
    stats = DecodeStats()
    try:
        return run(task, stats, ask, copy=copy), stats
    except Exception as exc:
        return failure_of(exc, task.job.request.key, task.job.episode.shard), stats


def end_if_store_gave_up(result: object) -> None:
    """Raise the error of ``result`` if it is a crop whose store gave up
    (``Failure.store_gave_up``).

    Whoever meets an outage first (the parent planning or prefetching, a
    decode worker reading a blob) spends the store's time budget
    (``give_up_after``) on it; the pass must end then. Handed over in plan
    order, the failure waited for the crops before it, which other
    processes were still retrying on clocks of their own: an outage took
    up to a budget per process, one after another, before the iteration
    raised. A storage failure is never skipped, so ending the pass loses
    no crop: the consumer's position stays on the first it did not get."""
    if isinstance(result, Failure) and result.store_gave_up:
        raise result.error()


def failure_of(exc: Exception, key: str | None, shard: str | None) -> Failure:
    """``Failure.of``, keeping the traceback of an exception nobody raised on
    purpose (not a ``StreamerError``) in the debug log: it is a bug somewhere,
    and the skip warning shows only its class and text."""
    if not isinstance(exc, StreamerError):
        log.debug("crop of %r (shard %r) failed unexpectedly", key, shard, exc_info=exc)
    return Failure.of(exc, key, shard)


def first_error(exc: BaseException) -> BaseException:
    """The error a task group failed with: the first of its group (the others
    are usually the same error met by other crops or workers, or follow from it)."""
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


@dataclass(frozen=True)
class Sealed:
    """A task as the parent sends it to a worker: pickled on its own, with
    its crop's key and shard, so that a task the worker cannot unpickle is
    that task's failure (``unseal``). Unpickling may do work that fails: a
    local shard's reader maps its file (``storage.local.mapped_file``), and a
    shard deleted or unreadable since it was planned made the whole batch's
    message raise in the worker, which died of it (a traceback, the crops
    retried on other workers until they were skipped as ``WorkerDied`` and
    the restart budget ran out, naming neither shard nor file)."""

    key: str
    shard: str | None
    data: bytes


def seal(task: Task) -> Sealed:
    """``task`` pickled for a worker (``Sealed``); raises if it does not pickle."""
    buffer = io.BytesIO()
    ForkingPickler(buffer).dump(task)  # as ``Connection.send`` pickles
    data = buffer.getvalue()
    return Sealed(task.job.request.key, task.job.episode.shard, data)


def unseal(sealed: Sealed) -> Task | Failure:
    """The task, or its failure when it does not unpickle here (a
    ``StorageError`` naming a file that cannot be mapped, say)."""
    try:
        task: Task = pickle.loads(sealed.data)  # what ``seal`` pickled: a Task
    except Exception as exc:
        return failure_of(exc, sealed.key, sealed.shard)
    return task


def ship(task: Task, arena: Arena | None) -> tuple[Task, Lease | None]:
    """The task with its fetched bytes put in the arena (and their lease, to
    release once the batch is answered or its worker reaped), or the task
    as it is when it carries none or the arena has no room."""
    if arena is None or task.fetched is None:
        return task, None
    pieces = task.fetched.pieces
    lease = arena.lease(task.fetched.nbytes, counted=False)
    if lease is None:
        return task, None
    placed = arena.write(lease, [view for _, view in pieces])
    layout = tuple((offset, at, n) for (offset, _), (at, n) in zip(pieces, placed, strict=True))
    return dataclasses.replace(task, fetched=None, shipped=layout), lease


def unshipped(task: Task, shared: mmap | None) -> Task:
    """A shipped task with its fetched bytes copied back out of the shared
    memory (the region is the parent's again once the batch is answered,
    and a format may keep the bytes longer: an MP4 demuxer kept open)."""
    if task.shipped is None:
        return task
    if shared is None:
        raise RuntimeError("a task's bytes were shipped to a worker without shared memory")
    pieces = tuple((offset, memoryview(shared[at : at + n])) for offset, at, n in task.shipped)
    return dataclasses.replace(task, fetched=Fetched(pieces), shipped=None)


def send_answers(
    conn: Connection,
    answers: list[tuple[Crop | Failure, DecodeStats]],
    shared: mmap | None,
    regions: list[tuple[int, int] | None],
) -> None:
    """Send a worker's answers to one batch of tasks, in one message: each
    crop's samples are written into the shared memory at its task's region
    when it has one and they fit (the message says only their shape), else
    sent as raw bytes after the message, in the batch's order.

    One message per batch is one wake-up of the parent per batch, not per
    crop. Pickling the samples would copy them twice more on each side (an
    8 s stereo crop at 44.1 kHz is 2.8 MB); ``send_bytes`` hands the buffer
    to the socket as it is and ``receive_piped`` reads it straight into
    the new array.
    """
    heads: list[tuple[Crop | Failure, DecodeStats, tuple[object, ...] | None]] = []
    piped: list[np.ndarray] = []
    for (crop, stats), region in zip(answers, regions, strict=True):
        if not isinstance(crop, Crop):
            heads.append((crop, stats, None))
            continue
        audio = crop.audio
        bare = dataclasses.replace(crop, audio=None)
        if shared is not None and region is not None and audio.nbytes <= region[1]:
            np.ndarray(audio.shape, audio.dtype, buffer=shared, offset=region[0])[...] = audio
            heads.append((bare, stats, (audio.shape, audio.dtype.str, True)))
            continue
        audio = np.ascontiguousarray(audio)
        heads.append((bare, stats, (audio.shape, audio.dtype.str, False)))
        piped.append(audio)
    conn.send(heads)
    for audio in piped:
        conn.send_bytes(memoryview(audio).cast("B"))


def ask_held_back(conn: Connection, number: int) -> Pieces:
    """The worker's side of a job's deferred ranges: ask the parent for those
    of the batch's task ``number``, receive them."""
    conn.send((ASK_HELD_BACK, number))
    return tuple((offset, memoryview(data)) for offset, data in conn.recv())


def held_back_answer(pieces: Pieces) -> tuple[tuple[int, bytes], ...]:
    """The parent's answer to ``ask_held_back``, to send: the job's deferred
    ranges (an MP4's ``moov``: megabytes for a long audiobook)."""
    return tuple((offset, bytes(view)) for offset, view in pieces)


def is_ask(message: object) -> bool:
    """Whether a worker's message asks for deferred ranges (``ask_held_back``)."""
    return isinstance(message, tuple) and len(message) == 2 and message[0] == ASK_HELD_BACK


def piped_answers(heads: object, arena: Arena | None, leases: list[Lease | None]) -> list[int]:
    """The crops of ``send_answers``'s first message, ``heads``, whose
    samples follow it through the pipe (by number), after checking that
    ``heads`` answers the batch (``RuntimeError`` if not)."""
    if not isinstance(heads, list) or len(heads) != len(leases):
        raise RuntimeError("a worker answered a batch with something else")
    piped = []
    for number, ((_, _, layout), lease) in enumerate(zip(heads, leases, strict=True)):
        if layout is None:
            continue
        if layout[2] and (arena is None or lease is None):
            raise RuntimeError("a worker answered in shared memory it was not given")
        if not layout[2]:
            piped.append(number)
    return piped


def receive_piped(conn: Connection, heads: list[Any], piped: list[int]) -> dict[int, np.ndarray]:
    """The samples of the ``piped`` crops of ``heads``, read from ``conn``
    (the rest of ``send_answers``; this blocks until they are all in)."""
    received = {}
    for number in piped:
        shape, dtype, _ = heads[number][2]
        received[number] = np.empty(shape, dtype=dtype)
        conn.recv_bytes_into(memoryview(received[number]).cast("B"))
    return received


def receive_answers(
    heads: list[Any],
    piped: dict[int, np.ndarray],
    arena: Arena | None,
    leases: list[Lease | None],
) -> list[tuple[tuple[Crop | Failure, DecodeStats], bool]]:
    """The answers of ``send_answers``, from its first message ``heads``
    and the samples of its ``piped`` crops (``receive_piped``). Also says
    of each crop whether it is in the arena, in its lease's region (then an
    array over it, which releases the region when it is garbage).

    The piped samples are all read before any array over the arena is made:
    a worker that dies in the middle of sending them leaves no such array
    behind, whose release would free a region its crop's retry uses."""
    got: list[tuple[tuple[Crop | Failure, DecodeStats], bool]] = []
    for number, ((crop, stats, layout), lease) in enumerate(zip(heads, leases, strict=True)):
        if layout is None:
            got.append(((crop, stats), False))
        elif number in piped:
            got.append(((dataclasses.replace(crop, audio=piped[number]), stats), False))
        else:
            assert arena is not None and lease is not None  # checked above
            audio = arena.array(lease, layout[0], layout[1])
            got.append(((dataclasses.replace(crop, audio=audio), stats), True))
    return got

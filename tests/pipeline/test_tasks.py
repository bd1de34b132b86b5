"""What crosses the process boundary: failures keep their exception's class and fields."""

from __future__ import annotations

import streamer
from streamer.errors import CropError, DataError, LayoutError, ShardError
from streamer.pipeline.tasks import Failure


def test_data_errors_pickle_with_their_fields() -> None:
    import pickle

    for kind in (DataError, CropError, ShardError, LayoutError):
        error = kind("bad", shard="a.wsds", key="k", offset=7)
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is kind and str(copy) == str(error)
        assert (copy.reason, copy.shard, copy.key, copy.offset) == ("bad", "a.wsds", "k", 7)
    assert str(pickle.loads(pickle.dumps(CropError("plain")))) == "plain"
    died = pickle.loads(pickle.dumps(streamer.WorkerDied("gone")))
    assert type(died) is streamer.WorkerDied and isinstance(died, streamer.StreamerError)


class _Stubborn(Exception):
    """An exception that pickles but cannot be unpickled (its constructor
    wants more than ``args``)."""

    def __init__(self, a: int, b: int) -> None:
        super().__init__(f"{a} and {b}")


def test_a_failure_whose_exception_does_not_pickle_names_its_class() -> None:
    import pickle

    failure = Failure.of(_Stubborn(1, 2), "k")
    assert failure.error() is failure.exception  # in-process: the exception itself
    sent = pickle.loads(pickle.dumps(failure))
    assert (sent.reason, sent.message, sent.key) == ("_Stubborn", "1 and 2", "k")
    error = sent.error()
    assert isinstance(error, streamer.WorkerError) and isinstance(error, streamer.StreamerError)
    assert (error.kind, str(error)) == ("_Stubborn", "_Stubborn: 1 and 2")
    assert type(pickle.loads(pickle.dumps(error))) is streamer.WorkerError
    key_error = pickle.loads(pickle.dumps(Failure.of(KeyError("x"), "k"))).error()
    assert type(key_error) is KeyError and key_error.args == ("x",)

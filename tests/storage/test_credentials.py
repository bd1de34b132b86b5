"""A known secret never shows up in logs, reprs, error messages or tracebacks."""

from __future__ import annotations

import logging

import pytest
from helpers import SECRET, everything_said

from streamer import open_dataset
from streamer.dataset.dataset import Dataset
from streamer.errors import StorageError


def failures(reader) -> list[BaseException]:  # type: ignore[no-untyped-def]
    """Errors from a read that exhausts its retries, and from a missing object."""
    found = []
    for action in (
        lambda: reader.read_sync(0, 10),
        lambda: reader.store.reader(reader.path + "x").size_sync(),
    ):
        with pytest.raises(StorageError) as caught:
            action()
        found.append(caught.value)
    return found


def test_s3_secret_from_options_stays_secret(s3, s3_uploaded, caplog) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level(logging.DEBUG)
    options = {"endpoint_url": s3.url, "key": "test-key-id", "secret": SECRET}
    dataset = open_dataset(f"s3://{s3_uploaded}/packed", **options, attempts=2, backoff=0.01)
    blob = dataset.blob(next(iter(dataset)))
    reader = dataset.store.reader(f"{s3_uploaded}/random.bin")
    s3.faults.errors = 10
    errors = failures(reader)
    said = everything_said(caplog, dataset, dataset.store, reader, blob, errors=errors)
    assert "503" in said and "not found" in said and "random.bin" in said
    assert SECRET not in said


def test_s3_secret_from_the_environment_stays_secret(s3, s3_uploaded, caplog, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test-key-id")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.url)
    dataset = open_dataset(f"s3://{s3_uploaded}/packed", attempts=2, backoff=0.01)
    assert len(dataset) > 0
    reader = dataset.store.reader(f"{s3_uploaded}/random.bin")
    s3.faults.errors = 10
    said = everything_said(caplog, dataset, dataset.store, reader, errors=failures(reader))
    assert s3.url in said
    assert SECRET not in said


def test_http_signatures_tokens_and_passwords_stay_secret(http, caplog, make_store) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level(logging.DEBUG)
    store = make_store(
        "http", headers={"Authorization": f"Bearer {SECRET}"}, attempts=2, backoff=0.01
    )
    host = http.url.removeprefix("http://")
    presigned = f"{http.url}/random.bin?X-Amz-Signature={SECRET}&token={SECRET}"
    reader = store.reader(presigned)
    assert reader.size_sync() == 700_001
    assert http.requests[-1].headers["Authorization"] == f"Bearer {SECRET}"  # it was sent
    http.faults.errors = 10
    errors = failures(reader)
    http.faults.ignore_range = True
    with pytest.raises(StorageError) as ignored:
        store.reader(presigned, size=700_001).read_sync(0, 1)
    http.reset()
    basic = make_store("http", attempts=1)
    dataset = Dataset(f"http://user:{SECRET}@{host}/packed", store=basic)
    assert len(dataset) > 0 and "Authorization" in http.requests[0].headers
    with pytest.raises(StorageError) as missing:
        basic.reader(f"http://user:{SECRET}@{host}/nope").size_sync()
    said = everything_said(
        caplog, reader, store, dataset, errors=[*errors, ignored.value, missing.value]
    )
    assert f"{http.url}/random.bin?…" in said
    assert SECRET not in said

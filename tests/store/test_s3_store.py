"""Stores on object storage (``s3://``) against a real S3-protocol server on loopback (moto): a
store written there reads back as the same store written locally, through chunkfit, zarr and
xarray; an append commits whole or not at all; one writer at a time."""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Self

import numpy as np
import pytest
from s3support import s3fs_client
from support import (
    REPO,
    assert_same_contents,
    cli_command,
    cli_env,
    contents,
    error_line,
    make_store,
    run_cli,
)

import chunkfit
from chunkfit.errors import StoreBusyError, StoreFormatError, StoreNotFoundError, UsageError
from chunkfit.store import transaction
from chunkfit.store.lease import Lease
from chunkfit.store.leasecommit import LeaseCommit
from chunkfit.store.remote import Remote

CSV = REPO / "data" / "ecg208.csv"


def _signal(n: int = 3000, c: int = 2, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, c)).astype(np.float32)


def _store_args() -> dict[str, object]:
    return {
        "segments": [(0, 1200), (1500, 3000)],
        "events": [5, 700, 2999],
        "labels": np.arange(3000) % 3,
    }


def test_store_written_to_s3_reads_back_equal_to_the_same_store_written_locally(
    bucket: str, tmp_path: Path
) -> None:
    sig = _signal()
    local = make_store(tmp_path / "l.zarr", sig, **_store_args())  # type: ignore[arg-type]
    url = make_store(f"s3://{bucket}/s.zarr", sig, **_store_args())  # type: ignore[arg-type]
    here, there = contents(local), contents(url)
    assert there["attrs"].pop("committed") == {
        "signal": 3000,
        "labels": 3000,
        "events": 3,
        "segments": 2,
        "last_segment": [1500, 3000],
    }
    assert_same_contents(here, there)


def test_info_of_an_s3_store_names_the_url_and_its_samples(bucket: str) -> None:
    url = make_store(f"s3://{bucket}/s.zarr", _signal())
    result = run_cli("info", url, "--json")
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    assert (info["path"], info["samples"], info["backend"]) == (url, 3000, "zarr")
    assert info["bytes_on_disk"] > 0


def test_xarray_opens_an_s3_store_with_chunkfits_storage_options(bucket: str) -> None:
    xr = pytest.importorskip("xarray")
    from chunkfit.store.remote import storage_options

    sig = _signal()
    url = make_store(f"s3://{bucket}/s.zarr", sig)
    ds = xr.open_zarr(url, storage_options=storage_options(), consolidated=False)
    np.testing.assert_array_equal(ds["signal"].values, sig)
    assert ds["signal"].dims == ("time", "channel")


def test_xarray_sees_the_appended_rows_once_an_s3_append_is_committed(bucket: str) -> None:
    xr = pytest.importorskip("xarray")
    from chunkfit.store.remote import storage_options

    sig, more = _signal(), _signal(100, seed=1)
    url = make_store(f"s3://{bucket}/s.zarr", sig)
    with chunkfit.StoreWriter(
        url, channels=["c0", "c1"], sample_rate=100.0, has_labels=False, append=True
    ) as w:
        w.write(more)
        w.add_segment(3000, 3100)
        w.commit()
    ds = xr.open_zarr(url, storage_options=storage_options())
    np.testing.assert_array_equal(ds["signal"].values, np.concatenate([sig, more]))
    np.testing.assert_array_equal(ds["segments"].values, [[0, 3000], [3000, 3100]])


def test_xarray_sees_only_the_committed_rows_when_an_array_document_was_grown_past_them(
    bucket: str,
) -> None:
    xr = pytest.importorskip("xarray")
    from chunkfit.store.remote import storage_options

    sig = _signal()
    url = make_store(f"s3://{bucket}/s.zarr", sig)
    import zarr

    arr = zarr.open_array(Remote(url).zarr_store(read_only=False), path="signal", mode="r+")
    arr.resize((3500, 2))  # an append killed after its array documents, before its root commit
    arr[3000:] = 9.0
    ds = xr.open_zarr(url, storage_options=storage_options())
    np.testing.assert_array_equal(ds["signal"].values, sig)


def test_missing_s3_store_is_refused_in_one_line(bucket: str) -> None:
    line = error_line(run_cli("info", f"s3://{bucket}/none.zarr"))
    assert line == (
        f"chunkfit: error: s3://{bucket}/none.zarr: store not found; create it with "
        f"`chunkfit ingest s3://{bucket}/none.zarr SOURCE`"
    )


def test_hdf5_store_on_s3_is_refused_in_one_line(bucket: str) -> None:
    with pytest.raises(
        UsageError, match=r"HDF5 stores are not supported on object storage; ingest into a \.zarr"
    ):
        chunkfit.open_store(f"s3://{bucket}/s.h5")


def test_ingest_cli_to_s3_then_append_reads_back_as_two_local_ingests(
    bucket: str, tmp_path: Path
) -> None:
    url = f"s3://{bucket}/ecg.zarr"
    for args in ([url, CSV], ["--append", url, CSV]):
        result = run_cli("ingest", *args, "--rate", "360", "--chunk-samples", "4096")
        assert result.returncode == 0, result.stderr
    local = tmp_path / "ecg.zarr"
    for args in ([local, CSV], ["--append", local, CSV]):
        assert run_cli("ingest", *args, "--rate", "360", "--chunk-samples", "4096").returncode == 0
    here, there = contents(local), contents(url)
    committed = there["attrs"].pop("committed")
    assert committed["signal"] == here["signal"].shape[0]
    for h, t in zip(here["attrs"]["sources"], there["attrs"]["sources"], strict=True):
        t["ingested_at"] = h.get("ingested_at")
    here["attrs"]["sources"] = there["attrs"]["sources"]
    assert_same_contents(here, there)


def test_rows_past_the_committed_length_are_not_read(bucket: str) -> None:
    sig = _signal()
    url = make_store(f"s3://{bucket}/s.zarr", sig)
    import zarr

    arr = zarr.open_array(Remote(url).zarr_store(read_only=False), path="signal", mode="r+")
    arr.resize((3500, 2))
    arr[3000:] = 9.0  # an append cut short before its commit
    with chunkfit.open_store(url) as s:
        assert s.n_samples == 3000
        np.testing.assert_array_equal(s.read(0, 3000), sig)


def test_append_after_an_append_cut_short_overwrites_its_rows(bucket: str) -> None:
    url = make_store(f"s3://{bucket}/s.zarr", _signal())
    import zarr

    arr = zarr.open_array(Remote(url).zarr_store(read_only=False), path="signal", mode="r+")
    arr.resize((3500, 2))
    arr[3000:] = 9.0
    more = _signal(100, seed=1)
    with chunkfit.StoreWriter(
        url, channels=["c0", "c1"], sample_rate=100.0, has_labels=False, append=True
    ) as w:
        w.write(more)
        w.add_segment(3000, 3100)
        w.commit()
    with chunkfit.open_store(url) as s:
        assert s.n_samples == 3100
        np.testing.assert_array_equal(s.read(3000, 3100), more)


class _Requests:
    """The requests zarr and chunkfit send through obstore while in a ``with``, as (operation, key):
    the real calls, to the real server, counted on the way."""

    OPERATIONS = (
        "get",
        "get_async",
        "get_range_async",
        "get_ranges_async",
        "head",
        "head_async",
        "put",
        "put_async",
    )

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []
        self._real: dict[str, Any] = {}

    def __enter__(self) -> Self:
        import obstore

        for op in self.OPERATIONS:
            real = self._real[op] = getattr(obstore, op)

            def counted(
                store: object,
                key: str,
                *args: object,
                _op: str = op,
                _real: Any = real,
                **kw: object,
            ) -> object:
                self.sent.append((_op.removesuffix("_async"), key))
                return _real(store, key, *args, **kw)

            setattr(obstore, op, counted)
        return self

    def __exit__(self, *_: object) -> None:
        import obstore

        for op, real in self._real.items():
            setattr(obstore, op, real)

    @property
    def operations(self) -> list[str]:
        return [op for op, _ in self.sent]

    def objects(self, op: str = "get") -> list[str]:
        return [key for o, key in self.sent if o == op]


def test_the_blocks_of_a_training_group_on_s3_are_read_at_once_not_one_after_another(
    bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each chunk request waits (up to 10 s) until a request of another block has started: read
    block after block, the first block's requests would all wait out the 10 s; read at once, none
    waits."""
    import asyncio

    import obstore

    from chunkfit.core.blocks import Block, read_group
    from chunkfit.core.labels import Labeller

    sig = _signal()
    url = make_store(f"s3://{bucket}/g.zarr", sig, labels=np.arange(3000) % 3)  # 64-sample chunks
    # Four blocks of 10 chunks each (640 samples: 625 windows of 16), read in a shuffled order.
    blocks = [Block(i, i * 640, 625, 16, 1) for i in (2, 0, 3, 1)]
    started: set[int] = set()
    waited_out: list[str] = []

    def gated(real: Any) -> Any:
        async def request(store: object, key: str, *args: object, **kw: object) -> object:
            chunk = re.search(r"/c/(\d+)", key)
            if chunk is not None:
                started.add(int(chunk.group(1)) // 10)
                deadline = time.monotonic() + 10
                while len(started) < 2:
                    if time.monotonic() > deadline:
                        waited_out.append(key)
                        break
                    await asyncio.sleep(0.005)
            return await real(store, key, *args, **kw)

        return request

    with chunkfit.open_store(url) as s:
        labeller = Labeller(s, "last")
        for op in ("get_async", "get_range_async"):
            monkeypatch.setattr(obstore, op, gated(getattr(obstore, op)))
        got = read_group(s, labeller, blocks, None)
    assert waited_out == []
    assert started == {0, 1, 2, 3}
    np.testing.assert_array_equal(
        got.samples, np.concatenate([sig[b.start : b.stop] for b in blocks])
    )
    labels = np.arange(3000) % 3
    ends = [
        b.start + 15 + np.arange(625) for b in blocks
    ]  # "last": the class of each window's last sample
    np.testing.assert_array_equal(got.labels, np.concatenate([labels[e] for e in ends]))


def test_reading_an_s3_store_lists_arrays_once_reads_a_chunk_in_one_request_refuses_a_missing_one(
    bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sig = _signal()
    url = make_store(
        f"s3://{bucket}/s.zarr", sig, labels=np.arange(3000) % 3
    )  # 64-sample chunks: 47 per array
    listed: list[str] = []
    real_keys = Remote.keys

    def counted(self: Remote, rel: str = "") -> list[str]:  # the real listing, counted
        listed.append(rel)
        return real_keys(self, rel)

    monkeypatch.setattr(Remote, "keys", counted)
    with _Requests() as calls, chunkfit.open_store(url) as s:
        got = np.concatenate([s.read(a, a + 250) for a in range(0, 3000, 250)])
        labels = np.concatenate([s.read_labels(a, a + 250) for a in range(0, 3000, 250)])
    np.testing.assert_array_equal(got, sig)
    np.testing.assert_array_equal(labels, np.arange(3000) % 3)
    assert sorted(listed) == [
        "labels",
        "signal",
    ]  # was one listing of the whole array per chunk read
    # Each chunk read is one GET (s3fs, which read them before, asked for each object's size first).
    assert "head" not in calls.operations, calls.operations
    chunks = [k for k in calls.objects() if "/c/" in k]
    assert len(set(chunks)) >= 2 * 47, chunks

    Remote(url).delete(["signal/c/20/0"])
    with chunkfit.open_store(url) as s:
        np.testing.assert_array_equal(s.read(0, 1280), sig[:1280])
        with pytest.raises(
            StoreFormatError, match=r"chunk signal/c/20/0 \(samples \[1280, 1344\)\) is missing"
        ):
            s.read(1000, 2000)


def test_opening_and_appending_to_an_s3_store_read_each_document_once(bucket: str) -> None:
    """Each request is a round trip to a far endpoint: a store opens from one read of its root (the
    arrays from its consolidated metadata), and an append reads each array's own document once (all
    at once), where it read the root 3 times and the documents 4-5 times each."""
    url = make_store(f"s3://{bucket}/s.zarr", _signal())

    def documents(calls: _Requests) -> list[str]:
        return sorted(k.split("/", 1)[1] for k in calls.objects() if k.endswith("zarr.json"))

    with _Requests() as calls, chunkfit.open_store(url) as s:
        assert s.n_samples == 3000
    assert documents(calls) == ["zarr.json"]

    more = _signal(100, seed=1)
    with (
        _Requests() as calls,
        chunkfit.StoreWriter(
            url, channels=["c0", "c1"], sample_rate=100.0, has_labels=False, append=True
        ) as w,
    ):
        w.write(more)
        w.add_segment(3000, 3100)
        w.commit()
    # The root once, under the lease (the store as committed), and each array's own document once.
    assert documents(calls) == [
        "events/zarr.json",
        "labels/zarr.json",
        "segments/zarr.json",
        "signal/zarr.json",
        "zarr.json",
    ]
    with chunkfit.open_store(url) as s:
        np.testing.assert_array_equal(s.read(0, 3100), np.concatenate([_signal(), more]))
        np.testing.assert_array_equal(s.segments, [[0, 3000], [3000, 3100]])


class _Rounds(_Requests):
    """``_Requests`` with every request held until the test releases it, in ``rounds``: lists of
    (operation, key relative to the store). The requests of a round are held until every one of
    them is in flight, then released together; a round's requests must come after every answer of
    the round before. So the requests of a round were sent at once, and each round only once the
    one before it was answered: round trips one after another, counted without a clock.

    Whatever does not fit is recorded, not held: ``stray`` (a request of no round, or of a later
    one, or one sent before the round before it was answered) and ``stuck`` (a round that never
    had all its requests in flight, because one of them waited for another's answer)."""

    PATIENCE = 120.0  # seconds a request waits for the rest of its round before it is let go

    def __init__(self, prefix: str, rounds: list[list[tuple[str, str]]]) -> None:
        super().__init__()
        self.prefix = prefix
        self.rounds = [sorted(r) for r in rounds]
        self.current = 0  # the round being gathered
        self.arrived: list[tuple[str, str]] = []
        self.answered = [0] * len(rounds)
        self.released = [threading.Event() for _ in rounds]
        self.stray: list[tuple[int, str, str]] = []  # (round being gathered, operation, key)
        self.stuck: str | None = None
        self._lock = threading.Lock()

    def _arrive(self, op: str, key: str) -> int | None:
        """The round the request belongs to, recorded as arrived; None for a stray one."""
        request = (op, key.removeprefix(self.prefix + "/"))
        with self._lock:
            r = self.current
            if r >= len(self.rounds) or self.stuck is not None:
                self.stray.append((r, *request))
                return None
            missing = list(self.rounds[r])
            for got in self.arrived:
                missing.remove(got)
            before_answered = r == 0 or self.answered[r - 1] == len(self.rounds[r - 1])
            if request not in missing or not before_answered:
                self.stray.append((r, *request))
                return None
            self.arrived.append(request)
            if len(self.arrived) == len(self.rounds[r]):
                self.arrived, self.current = [], r + 1
                self.released[r].set()
            return r

    def _give_up(self, r: int) -> None:
        with self._lock:
            if not self.released[r].is_set():
                self.stuck = f"round {r}: in flight {sorted(self.arrived)}, of {self.rounds[r]}"
                for event in self.released:
                    event.set()

    def _answered(self, r: int | None) -> None:
        if r is not None:
            with self._lock:
                self.answered[r] += 1

    def __enter__(self) -> Self:
        import obstore

        for op in self.OPERATIONS:
            real = self._real[op] = getattr(obstore, op)
            name = op.removesuffix("_async")
            if op.endswith("_async"):

                def held(
                    store: object,
                    key: str,
                    *args: object,
                    _op: str = name,
                    _real: Any = real,
                    **kw: object,
                ) -> object:
                    async def send() -> object:
                        import asyncio

                        self.sent.append((_op, key))
                        r = self._arrive(_op, key)
                        if r is not None:
                            waited = 0.0
                            while not self.released[r].is_set() and waited < self.PATIENCE:
                                await asyncio.sleep(0.01)  # the loop serves the round's others
                                waited += 0.01
                            self._give_up(r)
                        try:
                            return await _real(store, key, *args, **kw)
                        finally:
                            self._answered(r)

                    return send()
            else:

                def held(
                    store: object,
                    key: str,
                    *args: object,
                    _op: str = name,
                    _real: Any = real,
                    **kw: object,
                ) -> object:
                    self.sent.append((_op, key))
                    r = self._arrive(_op, key)
                    if r is not None:
                        self.released[r].wait(self.PATIENCE)
                        self._give_up(r)
                    try:
                        return _real(store, key, *args, **kw)
                    finally:
                        self._answered(r)

            setattr(obstore, op, held)
        return self


def test_an_append_to_an_s3_store_makes_five_round_trips_one_after_another(
    bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An append (labels, events, segments: four arrays to extend) is five round trips one after
    another: the lease; the root; every array's document and the committed rows of every array's
    last, partial chunk, all at once; the new chunks and documents beside the lease's renewal; the
    root that commits them. Each array's last chunk is read once (and the signal's, the labels',
    rewritten whole)."""
    monkeypatch.setenv("CHUNKFIT_LEASE_SECONDS", "3600")  # no renewal but the commit's own
    url = make_store(
        f"s3://{bucket}/s.zarr", _signal(), **_store_args()
    )  # 3,000 rows: 64-row chunks, the last partial (46); the 100 rows added reach chunk 48
    arrays = ["events", "labels", "segments", "signal"]
    tails = ["events/c/0", "labels/c/46", "segments/c/0/0", "signal/c/46/0"]
    written = [f"signal/c/{i}/0" for i in (46, 47, 48)] + [f"labels/c/{i}" for i in (46, 47, 48)]
    rounds = [
        [("put", ".chunkfit-lease")],
        [("get", "zarr.json")],
        [("get", f"{a}/zarr.json") for a in arrays] + [("get", k) for k in tails],
        [("put", k) for k in written + ["segments/c/0/0", "events/c/0"]]
        + [("put", f"{a}/zarr.json") for a in arrays]
        + [("put", ".chunkfit-lease")],
        [("put", "zarr.json")],
    ]
    more = _signal(100, seed=1)
    with (
        _Rounds(url.removeprefix(f"s3://{bucket}/"), rounds) as calls,
        chunkfit.StoreWriter(
            url, channels=["c0", "c1"], sample_rate=100.0, has_labels=True, append=True
        ) as w,
    ):
        w.write(more, np.arange(100) % 3)
        w.add_segment(3000, 3100)
        w.add_events(np.asarray([3050]))
        w.commit()
    assert calls.stuck is None, calls.stuck
    assert calls.stray == [], calls.stray
    assert calls.current == len(rounds)
    with chunkfit.open_store(url) as s:
        np.testing.assert_array_equal(s.read(0, 3100), np.concatenate([_signal(), more]))
        np.testing.assert_array_equal(
            s.read_labels(0, 3100), np.concatenate([np.arange(3000) % 3, np.arange(100) % 3])
        )
        assert s.segments.tolist() == [[0, 1200], [1500, 3000], [3000, 3100]]
        assert s.events.tolist() == [5, 700, 2999, 3050]


def test_an_append_to_an_s3_store_extends_its_last_segment_as_a_live_stream_commit_does(
    bucket: str,
) -> None:
    """A live stream's later commits extend the store's last segment: its last row is rewritten in
    the object of its chunk, from the rows read with the documents; the rows before it keep their
    values."""
    url = make_store(f"s3://{bucket}/s.zarr", _signal(), segments=[(0, 1200), (1500, 3000)])
    _append(url, 100, extend=(1500, 3100))
    assert _seen(url) == (3100, [[0, 1200], [1500, 3100]])
    with pytest.raises(
        StoreFormatError, match="the last segment does not start at 1400; cannot extend it"
    ):
        _append(url, 10, extend=(1400, 3110))
    assert _seen(url) == (3100, [[0, 1200], [1500, 3100]])


def _append(
    url: str,
    rows: int,
    *,
    add: tuple[int, int] | None = None,
    extend: tuple[int, int] | None = None,
) -> None:
    """Append ``rows`` samples as a new segment ``add``, or as the store's last segment, which
    starts at ``extend[0]``, now ending at ``extend[1]`` (a live stream's later commit)."""
    with chunkfit.StoreWriter(
        url, channels=["c0", "c1"], sample_rate=100.0, has_labels=False, append=True
    ) as w:
        w.write(_signal(rows, seed=rows))
        if add is not None:
            w.add_segment(*add)
        if extend is not None:
            w.extend_last_segment(*extend)
        w.commit()


def _seen(url: str) -> tuple[int, list[list[int]]]:
    with chunkfit.open_store(url) as s:
        return s.n_samples, s.segments.tolist()


def test_extending_a_last_segment_that_ends_a_full_chunk_of_segments_rewrites_that_chunk(
    bucket: str,
) -> None:
    """4,096 segments fill the segments array's first chunk exactly: the extended row is in that
    full chunk, not in a partial last one, so that chunk is read and rewritten whole."""
    url = make_store(
        f"s3://{bucket}/s.zarr", _signal(4096), segments=[(i, i + 1) for i in range(4096)]
    )
    _append(url, 4, extend=(4095, 4100))
    assert _seen(url) == (4100, [[i, i + 1] for i in range(4095)] + [[4095, 4100]])
    _append(url, 6, add=(4100, 4106))
    n, segments = _seen(url)
    assert (n, segments[-3:]) == (4106, [[4094, 4095], [4095, 4100], [4100, 4106]])


def test_a_reader_during_a_commit_that_extends_the_last_segment_sees_the_segment_as_committed(
    bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """That commit rewrites the segment's row in its chunk object before the root commits the new
    end. A reader opening the store in between (here the commit is held just before its root) sees
    the store as last committed, the segment's end from the root: it took the new end, past the
    samples it saw, and refused the store as damaged."""
    url = make_store(f"s3://{bucket}/s.zarr", _signal(), segments=[(0, 3000)])
    held, go = threading.Event(), threading.Event()
    monkeypatch.setattr(transaction, "pause_before_commit", lambda: (held.set(), go.wait(60)))
    commit = threading.Thread(target=_append, args=(url, 100), kwargs={"extend": (0, 3100)})
    commit.start()
    try:
        assert held.wait(60)
        assert _seen(url) == (3000, [[0, 3000]])
    finally:
        go.set()
        commit.join(60)
    assert _seen(url) == (3100, [[0, 3100]])


def test_an_append_after_a_commit_cut_short_that_extended_the_last_segment_keeps_the_committed_end(
    bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cut-short commit left the segment's row with the end it did not commit; the next append,
    which adds a segment after it, writes that row back as committed (it would otherwise overlap the
    new segment, a damaged store)."""
    url = make_store(f"s3://{bucket}/s.zarr", _signal(), segments=[(0, 3000)])

    def cut_short() -> None:
        raise ConnectionError("the commit is cut short before its root")

    monkeypatch.setattr(transaction, "pause_before_commit", cut_short)
    with pytest.raises(ConnectionError):
        _append(url, 100, extend=(0, 3100))
    monkeypatch.undo()
    assert _seen(url) == (3000, [[0, 3000]])
    _append(url, 50, add=(3000, 3050))
    assert _seen(url) == (3050, [[0, 3000], [3000, 3050]])


def test_an_open_s3_store_tells_an_append_committed_since(bucket: str) -> None:
    """``changed`` (what a training checks between epochs) compares with the root read at
    opening."""
    url = make_store(f"s3://{bucket}/s.zarr", _signal())
    with chunkfit.open_store(url) as s:
        assert s.changed() is None
        with chunkfit.StoreWriter(
            url, channels=["c0", "c1"], sample_rate=100.0, has_labels=False, append=True
        ) as w:
            w.write(_signal(100, seed=1))
            w.add_segment(3000, 3100)
            w.commit()
        assert s.changed() == "its signal had 3,000 samples and now has 3,100"


def test_second_writer_while_one_holds_the_lease_is_refused(bucket: str) -> None:
    url = make_store(f"s3://{bucket}/s.zarr", _signal())
    holder = Lease(Remote(url))
    holder.acquire()
    try:
        with pytest.raises(
            StoreBusyError, match=r"another process \(pid \d+ on .*\) is writing this store"
        ):
            chunkfit.StoreWriter(
                url, channels=["c0", "c1"], sample_rate=100.0, has_labels=False, append=True
            )
    finally:
        holder.release()
    with chunkfit.open_store(url) as s:
        assert s.n_samples == 3000


def _stale_lease(url: str) -> None:
    """The lease of a writer on another host that stopped renewing it a minute ago."""
    record = {"owner": "gone", "host": "elsewhere", "pid": 1, "expires": 0}
    Remote(url).put(".chunkfit-lease", json.dumps(record).encode())


def test_of_two_takers_of_one_stale_lease_only_the_first_gets_it(bucket: str) -> None:
    url = make_store(f"s3://{bucket}/s.zarr", _signal())
    _stale_lease(url)
    remote = Remote(url)
    found = remote.get_tagged(".chunkfit-lease")
    assert found is not None
    seen = found[1]  # both takers found the lease stale with this ETag
    assert remote.put_if(".chunkfit-lease", b"first", etag=seen) is not None
    assert remote.put_if(".chunkfit-lease", b"second", etag=seen) is None
    assert remote.get(".chunkfit-lease") == b"first"


def test_stale_lease_is_taken_over_and_the_next_writer_is_refused(bucket: str) -> None:
    url = make_store(f"s3://{bucket}/s.zarr", _signal())
    _stale_lease(url)
    first = Lease(Remote(url))
    first.acquire()
    try:
        with pytest.raises(
            StoreBusyError,
            match=rf"another process \(pid {os.getpid()} on .*\) is writing this store",
        ):
            Lease(Remote(url)).acquire()
    finally:
        first.release()
    assert Remote(url).get(".chunkfit-lease") is None


def test_holder_whose_lease_was_taken_over_commits_nothing_and_leaves_the_new_lease(
    bucket: str,
) -> None:
    url = make_store(f"s3://{bucket}/s.zarr", _signal())
    writer = chunkfit.StoreWriter(
        url, channels=["c0", "c1"], sample_rate=100.0, has_labels=False, append=True
    )
    writer.write(_signal(100, seed=1))
    assert isinstance(writer.strategy, LeaseCommit)
    lease = writer.strategy.lease
    assert lease is not None
    lease._stop.set()  # the writer stalls: its lease goes unrenewed past its expiry
    lease._thread.join()  # type: ignore[union-attr]
    _stale_lease(url)  # (expired, as it would be after a minute without renewal)
    taker = Lease(Remote(url))
    taker.acquire()
    try:
        with pytest.raises(
            StoreBusyError,
            match=r"lease expired unrenewed and another process took it over, so "
            r"nothing was committed",
        ):
            writer.commit()
        assert json.loads(Remote(url).get(".chunkfit-lease") or b"{}")["owner"] == taker.owner
    finally:
        taker.release()
    with chunkfit.open_store(url) as s:
        assert s.n_samples == 3000


def test_failed_new_s3_store_leaves_no_object(bucket: str) -> None:
    url = f"s3://{bucket}/s.zarr"
    writer = chunkfit.StoreWriter(
        url, channels=["a"], sample_rate=1.0, has_labels=False, append=False
    )
    with pytest.raises(RuntimeError, match="boom"), writer as w:
        w.write(np.zeros((200_000, 1), dtype=np.float32))
        raise RuntimeError("boom")
    assert s3fs_client().find(f"{bucket}/") == []
    with pytest.raises(StoreNotFoundError):
        chunkfit.open_store(url)


def test_new_s3_store_failing_while_its_chunks_are_in_flight_leaves_no_object(bucket: str) -> None:
    url = f"s3://{bucket}/s.zarr"
    writer = chunkfit.StoreWriter(
        url,
        channels=["a", "b"],
        sample_rate=1.0,
        has_labels=False,
        append=False,
        chunk_samples=512,
        codec="none",
    )
    with pytest.raises(RuntimeError, match="boom"), writer as w:
        for _ in range(4):
            w.write(np.random.default_rng(0).normal(size=(100_000, 2)).astype(np.float32))
        raise RuntimeError(
            "boom"
        )  # hundreds of chunk objects written, the last batches still being sent
    assert s3fs_client().find(f"{bucket}/") == []


def test_cli_append_while_another_process_appends_is_refused_in_one_line(bucket: str) -> None:
    url = make_store(f"s3://{bucket}/s.zarr", _signal(), channels=["time_s", "mlii_mv"])
    holder = Lease(Remote(url))
    holder.acquire()
    try:
        line = error_line(run_cli("ingest", "--append", url, CSV, "--rate", "100"))
    finally:
        holder.release()
    assert re.fullmatch(
        rf"chunkfit: error: {url}: another process \(pid {os.getpid()} on .+\) is writing this "
        r"store; run the command again when it has finished \(its lease expires in \d+ s\)",
        line,
    ), line


def _without_credentials() -> dict[str, str]:
    env = {
        k: v
        for k, v in cli_env().items()
        if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
    }
    return {
        **env,
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
        "AWS_CONFIG_FILE": "/nonexistent",
    }


def test_anon_reads_a_store_of_a_public_bucket_without_credentials(bucket: str) -> None:
    url = make_store(f"s3://{bucket}/s.zarr", _signal())
    import boto3

    client = boto3.client("s3")  # public objects (moto grants anonymous reads by ACL)
    client.put_bucket_acl(Bucket=bucket, ACL="public-read")
    for key in s3fs_client().find(bucket):
        client.put_object_acl(Bucket=bucket, Key=key.split("/", 1)[1], ACL="public-read")
    result = subprocess.run(
        cli_command("--anon", "info", url, "--json"),
        env=_without_credentials(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["samples"] == 3000


def test_no_credentials_without_anon_is_one_line(bucket: str) -> None:
    url = make_store(f"s3://{bucket}/s.zarr", _signal())
    result = subprocess.run(
        cli_command("info", url),
        env=_without_credentials(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert error_line(result) == (
        f"chunkfit: error: {url}: no AWS credentials found; set AWS_PROFILE or AWS_ACCESS_KEY_ID "
        "and AWS_SECRET_ACCESS_KEY, or pass --anon for a public bucket (nothing was read)"
    )

"""The store on its own: range reads, transactions, rollback of crashed appends, xarray."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np
import pytest
import zarr
from hypothesis import given
from hypothesis import strategies as st
from support import (
    SUFFIX,
    cli_command,
    cli_env,
    contents,
    examples,
    make_store,
    raw_zarr_array,
    snapshot,
)

import chunkfit
from chunkfit.errors import (
    StoreBusyError,
    StoreExistsError,
    StoreFormatError,
    StoreNotFoundError,
    UsageError,
)
from chunkfit.store import journal

SIGNAL = np.arange(1000, dtype=np.float32).reshape(500, 2) / 7


@pytest.fixture
def store(store_path: Path) -> Path:
    """500 samples x 2 channels, chunks of 64, three segments, events and labels."""
    return make_store(
        store_path,
        SIGNAL,
        segments=[(0, 100), (100, 350), (350, 500)],
        events=[3, 99, 100, 250, 499],
        labels=np.arange(500) % 4,
    )


# -- reading ------------------------------------------------------------------------------------


@examples(40)
@given(data=st.data())
def test_read_of_any_range_returns_exactly_those_samples(store: Path, data: st.DataObject) -> None:
    a = data.draw(st.integers(0, 500), label="a")
    b = data.draw(st.integers(a, 500), label="b")
    with chunkfit.open_store(store) as s:
        np.testing.assert_array_equal(s.read(a, b), SIGNAL[a:b])
        np.testing.assert_array_equal(s.read_labels(a, b), np.arange(a, b) % 4)
        np.testing.assert_array_equal(
            s.events_in(a, b), [e for e in [3, 99, 100, 250, 499] if a <= e < b]
        )


def test_read_past_the_end_is_refused(store: Path) -> None:
    with (
        chunkfit.open_store(store) as s,
        pytest.raises(UsageError, match=r"outside the signal \[0, 500\)"),
    ):
        s.read(490, 501)


def test_segments_in_a_range_are_clipped_to_it(store: Path) -> None:
    with chunkfit.open_store(store) as s:
        np.testing.assert_array_equal(s.segments_in(50, 400), [[50, 100], [100, 350], [350, 400]])


def test_store_reports_channels_rate_and_sizes(store: Path, backend: str) -> None:
    with chunkfit.open_store(store) as s:
        info = s.info()
    assert (info["backend"], info["samples"], info["channels"], info["sample_rate"]) == (
        backend,
        500,
        ["c0", "c1"],
        100.0,
    )
    assert (info["segments"], info["events"], info["chunk_samples"]) == (3, 5, 64)
    assert info["label_counts"] == {"0": 125, "1": 125, "2": 125, "3": 125}


def test_store_is_read_with_the_range_reads_of_its_chunks(store: Path) -> None:
    """A range read touches only the chunks it overlaps, so the signal is never read whole."""
    with chunkfit.open_store(store) as s:
        assert s.chunk_samples == 64
        assert s.read(130, 190).shape == (60, 2)


@examples(25)
@given(blocks=st.lists(st.integers(1, 90), min_size=1, max_size=8), seed=st.integers(0, 2**16))
def test_stats_streamed_block_by_block_equal_numpy_over_all_samples(
    tmp_path_factory: pytest.TempPathFactory, backend: str, blocks: list[int], seed: int
) -> None:
    rng = np.random.default_rng(seed)
    parts = [rng.normal(5, 3, size=(n, 2)).astype(np.float32) for n in blocks]
    path = tmp_path_factory.mktemp("stats") / f"s{SUFFIX[backend]}"
    with chunkfit.StoreWriter(
        path, channels=["a", "b"], sample_rate=1.0, has_labels=False, append=False, chunk_samples=16
    ) as w:
        for p in parts:
            w.write(p)
        w.add_segment(0, sum(blocks))
        w.commit()
    whole = np.concatenate(parts).astype(np.float64)
    with chunkfit.open_store(path) as s:
        stats = s.attrs["stats"]
    for j, name in enumerate(["a", "b"]):
        assert stats[name]["count"] == whole.shape[0]
        np.testing.assert_allclose(
            [stats[name]["mean"], stats[name]["std"], stats[name]["min"], stats[name]["max"]],
            [whole[:, j].mean(), whole[:, j].std(), whole[:, j].min(), whole[:, j].max()],
            rtol=1e-9,
            atol=1e-12,
        )


# -- opening what is not a store ----------------------------------------------------------------


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(f.relative_to(root)): f.read_bytes() for f in sorted(root.rglob("*")) if f.is_file()
    }


ZARR_CODECS = {"lz4": ("lz4", 5, "bitshuffle"), "zstd": ("zstd", 1, "shuffle"), "none": None}


def _zarr_reference(
    root: Path, codec: str, signal: np.ndarray, labels: np.ndarray, attrs: dict
) -> None:
    """The same arrays written by zarr itself, in one assignment each."""
    from zarr.codecs import BloscCodec

    group = zarr.open_group(store=str(root), mode="w-", zarr_format=3)
    spec = ZARR_CODECS[codec]
    for name, data, chunks, dims in (
        ("signal", signal, (64, 3), ["time", "channel"]),
        ("labels", labels, (64,), ["time"]),
    ):
        arr = group.create_array(
            name,
            shape=data.shape,
            dtype=data.dtype,
            chunks=chunks,
            fill_value=0,
            dimension_names=dims,
            compressors=None
            if spec is None
            else BloscCodec(cname=spec[0], clevel=spec[1], shuffle=spec[2]),
            config={"write_empty_chunks": True},
        )
        arr[:] = data
    group.attrs["chunkfit"] = attrs


@examples(20)
@given(
    cuts=st.lists(st.integers(1, 400), min_size=1, max_size=4, unique=True),
    codec=st.sampled_from(["lz4", "zstd", "none"]),
)
def test_zarr_files_written_without_zarr_are_the_files_zarr_writes(
    tmp_path_factory: pytest.TempPathFactory, cuts: list[int], codec: str
) -> None:
    """New stores are written without zarr, and appends encode whole chunks themselves: chunk
    files and metadata must be what zarr writes, whatever the split of the rows into writes."""
    from chunkfit.store.backends import open_backend

    rng = np.random.default_rng(len(cuts))
    signal = rng.normal(size=(401, 3)).astype(np.float32)
    labels = rng.integers(0, 5, size=401).astype(np.int32)
    attrs = {"channels": ["a", "b", "c"], "rate": 2.5}
    bounds = [0, *sorted(cuts), 401]
    base = tmp_path_factory.mktemp("direct")
    _zarr_reference(base / "zarr.zarr", codec, signal, labels, attrs)
    expected = _files(base / "zarr.zarr")

    new = open_backend(base / "new.zarr", "zarr", writable=True, create=True)
    new.create("signal", (0, 3), "float32", (64, 3), codec)
    new.create("labels", (0,), "int32", (64,), codec)
    for a, z in zip(bounds, bounds[1:], strict=False):
        new.write_rows("signal", a, signal[a:z])
        new.write_rows("labels", a, labels[a:z])
    new.set_attrs(attrs)
    new.close()
    assert _files(base / "new.zarr") == expected

    # An append: a store holding the first part, grown by zarr-opened writes of the rest.
    first = bounds[1]
    new = open_backend(base / "appended.zarr", "zarr", writable=True, create=True)
    new.create("signal", (0, 3), "float32", (64, 3), codec)
    new.create("labels", (0,), "int32", (64,), codec)
    new.write_rows("signal", 0, signal[:first])
    new.write_rows("labels", 0, labels[:first])
    new.set_attrs(attrs)
    new.close()
    grown = open_backend(base / "appended.zarr", "zarr", writable=True)
    for a, z in zip(bounds[1:], bounds[2:], strict=False):
        grown.write_rows("signal", a, signal[a:z])
        grown.write_rows("labels", a, labels[a:z])
    grown.close()
    assert _files(base / "appended.zarr") == expected


def test_missing_store_is_reported_as_not_found(store_path: Path) -> None:
    with pytest.raises(
        StoreNotFoundError, match="store not found; create it with `chunkfit ingest"
    ):
        chunkfit.open_store(store_path)


def test_zarr_store_path_that_is_a_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "file.zarr"
    path.write_text("not a directory")
    with pytest.raises(StoreFormatError, match="a zarr store is a directory, this is a file"):
        chunkfit.open_store(path)


def test_hdf5_store_path_that_is_a_directory_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "dir.h5"
    path.mkdir()
    with pytest.raises(StoreFormatError, match="an HDF5 store is a file, this is a directory"):
        chunkfit.open_store(path)


def test_truncated_hdf5_store_is_refused(tmp_path: Path) -> None:
    path = make_store(tmp_path / "cut.h5", SIGNAL)
    path.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(StoreFormatError, match="cannot open as an HDF5 file"):
        chunkfit.open_store(path)


def test_zarr_group_without_chunkfit_attributes_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "plain.zarr"
    zarr.open_group(str(path), mode="w", zarr_format=3).create_array(
        "signal", shape=(4, 1), dtype="float32"
    )
    with pytest.raises(StoreFormatError, match="attribute 'chunkfit' is missing"):
        chunkfit.open_store(path)


# -- transactions -------------------------------------------------------------------------------


def test_new_store_does_not_exist_until_commit(store_path: Path) -> None:
    with chunkfit.StoreWriter(
        store_path, channels=["a"], sample_rate=1.0, has_labels=False, append=False, chunk_samples=8
    ) as w:
        w.write(np.ones((100, 1), dtype=np.float32))
        w.add_segment(0, 100)
        assert not store_path.exists()
        w.commit()
    assert store_path.exists()


def test_abandoned_new_store_leaves_no_file_behind(store_path: Path) -> None:
    with (
        pytest.raises(RuntimeError),
        chunkfit.StoreWriter(
            store_path,
            channels=["a"],
            sample_rate=1.0,
            has_labels=False,
            append=False,
            chunk_samples=8,
        ) as w,
    ):
        w.write(np.ones((100, 1), dtype=np.float32))
        raise RuntimeError("stop")
    assert list(store_path.parent.iterdir()) == []


def test_new_store_over_an_existing_one_is_refused(store: Path) -> None:
    with pytest.raises(StoreExistsError, match="already exists"):
        chunkfit.StoreWriter(store, channels=["a"], sample_rate=1.0, has_labels=False, append=False)


def test_abandoned_append_leaves_the_store_byte_for_byte(store: Path) -> None:
    before = snapshot(store)
    with (
        pytest.raises(RuntimeError),
        chunkfit.StoreWriter(
            store, channels=["c0", "c1"], sample_rate=100.0, has_labels=True, append=True
        ) as w,
    ):
        w.write(np.ones((300, 2), dtype=np.float32), np.zeros(300, dtype=np.int64))
        w.add_segment(500, 800)
        raise RuntimeError("stop")
    assert snapshot(store) == before


def _append_then_die_before_commit(store: Path, rows: int) -> subprocess.CompletedProcess[bytes]:
    """Run an append in a real process that dies (os._exit) at the last moment before its commit.

    The commit point is the journal's ``commit`` for zarr and the final ``os.replace`` for HDF5:
    everything is written, only the step that makes it visible is missing.
    """
    script = textwrap.dedent(
        f"""
        import os, sys
        import numpy as np
        import chunkfit
        from chunkfit.store import journal
        journal.commit = lambda root: os._exit(9)
        real_replace = os.replace
        def replace(src, dst):
            if os.path.abspath(dst) == os.path.abspath(sys.argv[1]):
                os._exit(9)
            real_replace(src, dst)
        os.replace = replace
        with chunkfit.StoreWriter(sys.argv[1], channels=["c0", "c1"], sample_rate=100.0,
                                  has_labels=True, append=True) as w:
            w.write(np.full(({rows}, 2), 3.0, dtype=np.float32), np.ones({rows}, dtype=np.int64))
            w.add_segment(w.start, w.start + {rows})
            w.add_events(np.array([w.start + 1]))
            w.add_source({{"name": "late", "size": None, "rows": {rows}, "sha256": None}})
            w.commit()
        """
    )
    return subprocess.run(
        [sys.executable, "-c", script, str(store)], env=cli_env(), capture_output=True, check=False
    )


def _half_done_append_on_disk(store: Path) -> bool:
    """A zarr journal with its manifest, or the HDF5 working copy, left by the dead writer."""
    if store.suffix == ".zarr":
        return (store / journal.JOURNAL / journal.MANIFEST).exists()
    return any(store.parent.glob(f".{store.name}.chunkfit-tmp-*"))


def test_append_that_dies_before_commit_is_rolled_back_on_open(store: Path) -> None:
    before = snapshot(store)
    expected = contents(store)
    result = _append_then_die_before_commit(store, 1000)
    assert result.returncode == 9, result.stderr
    assert _half_done_append_on_disk(store)
    after = contents(store)
    np.testing.assert_array_equal(after["signal"], expected["signal"])
    assert after["attrs"] == expected["attrs"]
    np.testing.assert_array_equal(after["segments"], expected["segments"])
    np.testing.assert_array_equal(after["events"], expected["events"])
    assert snapshot(store) == before


def test_zarr_append_that_dies_is_rolled_back_in_the_raw_zarr_hierarchy(tmp_path: Path) -> None:
    store_path = make_store(tmp_path / "raw.zarr", SIGNAL, labels=np.zeros(500, dtype=np.int64))
    before = snapshot(store_path)
    _append_then_die_before_commit(store_path, 700)
    assert _half_done_append_on_disk(store_path)
    chunkfit.open_store(store_path).close()
    signal = raw_zarr_array(store_path, "signal")
    assert signal.shape == (500, 2)
    np.testing.assert_array_equal(signal[:], SIGNAL)
    assert not (store_path / journal.JOURNAL).exists()
    assert snapshot(store_path) == before


def test_append_of_zeros_into_a_partial_all_zero_chunk_keeps_that_chunk(tmp_path: Path) -> None:
    """The appended rows fill the store's last, partial chunk with zeros: its file must stay."""
    path = tmp_path / "zeros.zarr"
    src = tmp_path / "zeros.csv"
    src.write_text("a\n" + "0\n" * 100)
    chunkfit.ingest(path, [str(src)], chunkfit.IngestOptions(rate=1.0, chunk_samples=64))
    chunkfit.ingest(path, [str(src)], chunkfit.IngestOptions(rate=1.0), append=True)
    with chunkfit.open_store(path) as s:
        np.testing.assert_array_equal(s.read(0, 200), np.zeros((200, 1), dtype=np.float32))


def test_zarr_append_after_an_all_zero_last_chunk_rolls_back_to_the_same_files(
    tmp_path: Path,
) -> None:
    """A chunk holding only the fill value may be absent (zarr's default); rollback must not add
    it."""
    path = make_store(
        tmp_path / "zeros.zarr",
        np.zeros((100, 2), dtype=np.float32),
        labels=np.zeros(100, dtype=np.int64),
    )
    for last_chunk in ["signal/c/1", "labels/c/1"]:
        target = path / last_chunk
        shutil.rmtree(target) if target.is_dir() else target.unlink()
    before = snapshot(path)
    _append_then_die_before_commit(path, 10)
    assert _half_done_append_on_disk(path)
    chunkfit.open_store(path).close()
    assert snapshot(path) == before


def test_zarr_store_being_appended_by_a_live_process_is_reported_busy_and_left_alone(
    tmp_path: Path,
) -> None:
    """(HDF5 appends work on a copy, so readers simply see the old file meanwhile.)"""
    store = make_store(tmp_path / "busy.zarr", SIGNAL, labels=np.zeros(500, dtype=np.int64))
    proc = subprocess.Popen(
        cli_command(
            "ingest",
            "--append",
            str(store),
            "-",
            "--rate",
            "100",
            "--label-column",
            "label",
            "--commit-every",
            "600",  # one transaction, held open until the stream ends
        ),
        env=cli_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None
    proc.stdin.write(b"c0,c1,label\n1,2,0\n3,4,1\n")
    proc.stdin.flush()
    for _ in range(
        4800
    ):  # the writer holds its journal once it has read the first block (4 minutes at most)
        if (store / journal.JOURNAL / journal.MANIFEST).exists() or proc.poll() is not None:
            break
        time.sleep(0.05)
    assert (store / journal.JOURNAL / journal.MANIFEST).exists()
    with pytest.raises(
        StoreBusyError, match=rf"process {proc.pid} is appending to this store right now"
    ):
        chunkfit.open_store(store)
    _out, err = proc.communicate(b"5,6,0\n", timeout=240)
    assert proc.returncode == 0, err
    with chunkfit.open_store(store) as s:
        np.testing.assert_array_equal(s.read(500, 503), [[1, 2], [3, 4], [5, 6]])


def _append_inside_the_load(
    monkeypatch: pytest.MonkeyPatch, append: Callable[[], None]
) -> list[str]:
    """Run ``append`` once, the moment the next store open has read the signal's length and is about
    to read the segments: the interleaving of a reader with a live stream's commit."""
    ran: list[str] = []
    read_all = chunkfit.Store._read_all

    def racing(self: chunkfit.Store, name: str) -> np.ndarray:
        if name == "segments" and not ran:
            ran.append(f"{self.n_samples}")
            append()
        return read_all(self, name)

    monkeypatch.setattr(chunkfit.Store, "_read_all", racing)
    return ran


def _extend(store: Path, rows: int) -> chunkfit.StoreWriter:
    """An append that continues the store's one segment, as a live stream's commit does."""
    w = chunkfit.StoreWriter(
        store, channels=["c0", "c1"], sample_rate=100.0, has_labels=False, append=True
    )
    w.write(np.ones((rows, 2), dtype=np.float32))
    w.extend_last_segment(0, SIGNAL.shape[0] + rows)
    return w


def test_an_open_that_overlaps_a_commit_reads_the_store_again_instead_of_calling_it_damaged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_store(tmp_path / "live.zarr", SIGNAL)

    def commit() -> None:
        with _extend(store, 200) as w:
            w.commit()

    ran = _append_inside_the_load(monkeypatch, commit)
    with chunkfit.open_store(store) as s:
        assert ran == [
            "500"
        ]  # the first load saw the old length, then the commit rewrote the segment
        assert (s.n_samples, s.segments.tolist()) == (700, [[0, 700]])
        assert not s.changed()
        np.testing.assert_array_equal(s.read(498, 502), np.r_[SIGNAL[498:], np.ones((2, 2))])


def test_an_append_that_begins_during_an_open_makes_it_busy_not_damaged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_store(tmp_path / "live.zarr", SIGNAL)
    held: list[chunkfit.StoreWriter] = []

    def begin() -> None:  # the segment row is rewritten in place; the commit has not happened
        w = _extend(store, 200)
        w._write_small()
        held.append(w)

    _append_inside_the_load(monkeypatch, begin)
    with pytest.raises(StoreBusyError, match="is appending to this store right now"):
        chunkfit.open_store(store)
    [w] = held
    w.abort()
    with chunkfit.open_store(store) as s:
        assert (s.n_samples, s.segments.tolist()) == (500, [[0, 500]])


def test_a_journal_being_set_up_is_busy_to_readers_and_appenders_never_rolled_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The moment an append's journal appears it names its writer, so nobody takes it for a dead
    writer's journal and rolls it back under the append."""
    store = make_store(tmp_path / "setup.zarr", SIGNAL)
    entered, release = threading.Event(), threading.Event()
    record = journal._record

    def slow_record(root: Path, where: Path) -> None:
        entered.set()
        release.wait(60)
        record(root, where)

    monkeypatch.setattr(journal, "_record", slow_record)
    failed: list[BaseException] = []

    def append() -> None:
        try:
            with chunkfit.StoreWriter(
                store, channels=["c0", "c1"], sample_rate=100.0, has_labels=False, append=True
            ) as w:
                w.write(np.ones((10, 2), dtype=np.float32))
                w.add_segment(500, 510)
                w.commit()
        except BaseException as err:  # noqa: BLE001 - reported by the assertion below
            failed.append(err)

    thread = threading.Thread(target=append)
    thread.start()
    try:
        assert entered.wait(60)
        with pytest.raises(StoreBusyError, match="is appending to this store right now"):
            chunkfit.open_store(store)
        with pytest.raises(StoreBusyError, match="is appending to this store right now"):
            chunkfit.StoreWriter(
                store, channels=["c0", "c1"], sample_rate=100.0, has_labels=False, append=True
            )
        assert (store / journal.JOURNAL / journal.OWNER).read_text() == str(os.getpid())
    finally:
        release.set()
        thread.join(60)
    assert failed == []
    assert (
        sorted(p.name for p in store.iterdir() if p.name.startswith(".")) == []
    )  # nothing left aside
    with chunkfit.open_store(store) as s:
        assert (s.n_samples, s.segments.tolist()) == (510, [[0, 500], [500, 510]])


def test_zarr_store_opened_during_an_append_in_this_process_is_busy_and_not_rolled_back(
    tmp_path: Path,
) -> None:
    store = make_store(tmp_path / "own.zarr", SIGNAL)
    with chunkfit.StoreWriter(
        store, channels=["c0", "c1"], sample_rate=100.0, has_labels=False, append=True
    ) as w:
        w.write(np.ones((10, 2), dtype=np.float32))
        with pytest.raises(StoreBusyError, match="is appending to this store right now"):
            chunkfit.open_store(store)
        w.add_segment(500, 510)
        w.commit()
    with chunkfit.open_store(store) as s:
        np.testing.assert_array_equal(s.read(498, 510), np.r_[SIGNAL[498:], np.ones((10, 2))])


# -- users' own tools -----------------------------------------------------------------------------


def test_xarray_opens_a_zarr_store_with_named_dimensions(tmp_path: Path) -> None:
    xr = pytest.importorskip("xarray")
    path = make_store(tmp_path / "x.zarr", SIGNAL, events=[1, 2], labels=np.arange(500) % 3)
    ds = xr.open_zarr(path, consolidated=False)
    assert ds["signal"].dims == ("time", "channel")
    assert ds["labels"].dims == ("time",)
    assert ds["events"].dims == ("event",)
    assert ds["segments"].dims == ("segment", "bound")
    np.testing.assert_array_equal(ds["signal"].values, SIGNAL)
    np.testing.assert_array_equal(ds["labels"].values, np.arange(500) % 3)


def test_xarray_open_dataset_with_the_zarr_engine_reads_the_same_values(tmp_path: Path) -> None:
    xr = pytest.importorskip("xarray")
    path = make_store(tmp_path / "x.zarr", SIGNAL)
    ds = xr.open_dataset(path, engine="zarr", consolidated=False)
    np.testing.assert_array_equal(ds["signal"].isel(time=slice(10, 20)).values, SIGNAL[10:20])
    assert json.loads(json.dumps(ds.attrs["chunkfit"]))["channels"] == ["c0", "c1"]


def test_hdf5_store_names_the_dimensions_of_each_dataset(tmp_path: Path) -> None:
    path = make_store(tmp_path / "x.h5", SIGNAL, labels=np.zeros(500, dtype=np.int64))
    with h5py.File(path, "r") as f:
        assert json.loads(f["signal"].attrs["dimension_names"]) == ["time", "channel"]
        assert json.loads(f["labels"].attrs["dimension_names"]) == ["time"]

"""Every user mistake: exit non-zero, one stderr line naming the place and the fix, nothing written.

Each case runs the real CLI in a subprocess inside a tmp dir holding only its sources, so the
messages name files relatively and "nothing written" means the dir still holds only the sources.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from subprocess import CompletedProcess
from typing import NamedTuple

import h5py
import numpy as np
import pytest
from support import SUFFIX, contents, error_line, run_cli, snapshot, write_csv

import chunkfit
from chunkfit import IngestOptions


class Case(NamedTuple):
    """Files to create (an ``.h5`` file gets a dataset /signal), arguments after the store, and
    the error line after "chunkfit: error: "."""

    id: str
    files: dict[str, str | bytes | None]
    args: list[str]
    line: str
    code: int = 1


BAD_DATA = [
    Case(
        "ragged-row",
        {"ragged.csv": "a,b\n1,2\n3\n"},
        ["ragged.csv", "--rate", "1"],
        "ragged.csv:3: ragged row: expected 2 fields separated by ',', found 1; fix or remove the "
        "line",
    ),
    Case(
        "ragged-row-tsv",
        {"wide.tsv": "a\tb\n1\t2\n3\t4\t5\n"},
        ["wide.tsv", "--rate", "1"],
        "wide.tsv:3: ragged row: expected 2 fields separated by '\\t', found 3; fix or remove the "
        "line",
    ),
    Case(
        "non-numeric-field",
        {"text.csv": "a,b\n1,2\n3,oops\n"},
        ["text.csv", "--rate", "1"],
        "text.csv:3:2: 'oops' in column 'b' is not a number; fix the value or leave the column "
        "out with --columns",
    ),
    Case(
        "nan",
        {"nan.csv": "a,b\n1,2\nnan,4\n"},
        ["nan.csv", "--rate", "1"],
        "nan.csv:3:1: 'nan' in channel 'a' is not a finite number; fix the source or pass --nan "
        "keep / --nan interpolate",
    ),
    Case(
        "inf",
        {"inf.csv": "a,b\n1,2\n3,-inf\n"},
        ["inf.csv", "--rate", "1"],
        "inf.csv:3:2: '-inf' in channel 'b' is not a finite number; fix the source or pass --nan "
        "keep / --nan interpolate",
    ),
    Case(
        "empty-field",
        {"hole.csv": "a,b\n1,2\n3,\n"},
        ["hole.csv", "--rate", "1"],
        "hole.csv:3:2: empty value in channel 'b'; fix the source or pass --nan keep / --nan "
        "interpolate",
    ),
    Case(
        "beyond-float32",
        {"huge.csv": "a\n1\n-2e40\n"},
        ["huge.csv", "--rate", "1"],
        "huge.csv:3:1: '-2e40' in channel 'a' is beyond float32 storage (largest magnitude "
        "3.403e+38); rescale the column",
    ),
    Case(
        "time-goes-backwards",
        {"back.csv": "t,a\n0,1\n1,2\n0.5,3\n"},
        ["back.csv", "--time-column", "t"],
        "back.csv:4:1: time goes backwards or repeats (0.5 s after 1 s); sort the log by time or "
        "split it into separate sources",
    ),
    Case(
        "time-repeats",
        {"same.csv": "a,t\n1,0\n2,1\n3,1\n"},
        ["same.csv", "--time-column", "t"],
        "same.csv:4:2: time goes backwards or repeats (1 s after 1 s); sort the log by time or "
        "split it into separate sources",
    ),
    Case(
        "bad-timestamp",
        {"iso.csv": "t,a\n2024-01-01T00:00:00,1\nyesterday,2\n"},
        ["iso.csv", "--time-column", "t"],
        "iso.csv:3:1: 'yesterday' in time column 't' is not an ISO 8601 timestamp like the first "
        "row's; fix the value",
    ),
    Case(
        "non-integer-label",
        {"lab.csv": "a,label\n1,0\n2,x\n"},
        ["lab.csv", "--rate", "1", "--label-column", "label"],
        "lab.csv:3:2: label 'x' in column 'label' is not an integer class",
    ),
    Case(
        "empty-source",
        {"empty.csv": ""},
        ["empty.csv", "--rate", "1"],
        "empty.csv: empty source: no rows to ingest",
    ),
    Case(
        "header-only-source",
        {"header.csv": "a,b\n"},
        ["header.csv", "--rate", "1"],
        "header.csv: empty source: no data rows to ingest",
    ),
    Case(
        "empty-second-source",
        {"ok.csv": "a,b\n1,2\n", "header.csv": "a,b\n"},
        ["ok.csv", "header.csv", "--rate", "1"],
        "header.csv: empty source: no data rows to ingest",
    ),
    Case(
        "sources-with-other-channels",
        {"a.csv": "a,b\n1,2\n", "c.csv": "a,c\n1,2\n"},
        ["a.csv", "c.csv", "--rate", "1"],
        "c.csv: channels ['a', 'c'] differ from ['a', 'b'] of a.csv; a store holds one set of "
        "channels: ingest each instrument into a store of its own, or, if they are one channel "
        "under two names, give it one name with --names a,b",
    ),
    Case(
        "sources-at-other-rates",
        {"a.csv": "t,x\n0,1\n1,2\n2,3\n", "b.csv": "t,x\n9,1\n9.5,2\n10,3\n"},
        ["a.csv", "b.csv", "--time-column", "t"],
        "b.csv: runs at 2 Hz, the earlier sources at 1 Hz; resample it or ingest it into a "
        "separate store",
    ),
    Case(
        "event-after-the-signal",
        {"ok.csv": "a,b\n1,2\n3,4\n", "events.txt": "0\n2\n"},
        ["ok.csv", "--rate", "1", "--events", "events.txt"],
        "events.txt:2: event at sample 2 is outside the signal (0 to 1 samples in this ingest); "
        "fix or drop the marker",
    ),
    Case(
        "event-before-the-signal",
        {"ok.csv": "a,b\n1,2\n3,4\n", "events.txt": "-1\n"},
        ["ok.csv", "--rate", "1", "--events", "events.txt"],
        "events.txt:1: event at sample -1 is outside the signal (0 to 1 samples in this ingest); "
        "fix or drop the marker",
    ),
    Case(
        "event-time-outside-the-signal",
        {"ok.csv": "t,a\n0,1\n1,2\n", "events.txt": "7.5\n"},
        ["ok.csv", "--time-column", "t", "--events", "events.txt"],
        "events.txt:1: event at time 7.5 falls in no recorded segment (outside the signal or in a "
        "gap)",
    ),
    Case(
        "event-not-a-number",
        {"ok.csv": "a,b\n1,2\n3,4\n", "events.txt": "0\nsoon\n"},
        ["ok.csv", "--rate", "1", "--events", "events.txt"],
        "events.txt:2: 'soon' is neither a sample index nor a timestamp",
    ),
    Case(
        "events-file-of-one-word",
        {"ok.csv": "a,b\n1,2\n3,4\n", "events.txt": "peak\n"},
        ["ok.csv", "--rate", "1", "--events", "events.txt"],
        "events.txt:1: 'peak' is neither a sample index nor a timestamp, and no marker follows "
        "it; give one sample index or time per line",
    ),
    Case(
        "missing-events-file",
        {"ok.csv": "a,b\n1,2\n3,4\n"},
        ["ok.csv", "--rate", "1", "--events", "missing.txt"],
        "missing.txt: events file not found; check --events",
    ),
    Case(
        "unknown-format",
        {"data.xlsx": b"PK\x03\x04"},
        ["data.xlsx"],
        "data.xlsx: unknown format '.xlsx'; chunkfit reads CSV/TSV text (.csv .tsv .txt .log, "
        "optionally .gz), .npy, HDF5 datasets (file.h5:/dataset), WFDB (.hea), EDF/BDF (.edf "
        ".bdf), MiniSEED (.mseed .miniseed .ms), Parquet (.parquet), WAV/FLAC (.wav .flac) or - "
        "for standard input",
    ),
    Case(
        "missing-file",
        {"ok.csv": "a,b\n1,2\n"},
        ["ok.csv", "nope.csv", "--rate", "1"],
        "nope.csv: no such file; check the path",
    ),
    Case(
        "not-really-npy",
        {"fake.npy": "a,b\n1,2\n"},
        ["fake.npy", "--rate", "1"],
        "fake.npy: not a .npy file (no NumPy header); save the array with numpy.save",
    ),
    Case(
        "utf16-text",
        {"utf16.csv": "a,b\n1,2\n".encode("utf-16")},
        ["utf16.csv", "--rate", "1"],
        "utf16.csv:1: binary data or UTF-16 text, not a CSV log; save it as UTF-8 text",
    ),
    Case(
        "duplicate-column-names",
        {"dup.csv": "a,a\n1,2\n"},
        ["dup.csv", "--rate", "1"],
        "dup.csv:1: duplicate column name(s) a; rename them",
    ),
]


# Mistakes in the command itself: refused before any store work, so one backend is enough.
BAD_USAGE = [
    Case(
        "hdf5-source-without-dataset",
        {"in.h5": None},
        ["in.h5"],
        "in.h5: name the dataset inside the HDF5 file, e.g. in.h5:/signal",
        2,
    ),
    Case(
        "hdf5-source-with-missing-dataset",
        {"in.h5": None},
        ["in.h5:/nope", "--rate", "1"],
        "in.h5: no dataset '/nope' (datasets: /signal)",
        1,
    ),
    Case(
        "missing-time-column",
        {"ok.csv": "a,b\n1,2\n"},
        ["ok.csv", "--time-column", "time"],
        "ok.csv:1: --time-column 'time' is not a column (columns: a, b); name a column of the "
        "header or give a 0-based position",
        2,
    ),
    Case(
        "missing-channel-column",
        {"ok.csv": "a,b\n1,2\n"},
        ["ok.csv", "--columns", "a,zz"],
        "ok.csv:1: --columns 'zz' is not a column (columns: a, b); name a column of the header or "
        "give a 0-based position",
        2,
    ),
    Case(
        "unknown-nan-policy",
        {"ok.csv": "a,b\n1,2\n"},
        ["ok.csv", "--nan", "bogus"],
        "--nan must be one of refuse, keep, interpolate (received 'bogus')",
        2,
    ),
    Case("stdin-twice", {}, ["-", "-"], "standard input (-) can be given only once", 2),
    Case(
        "negative-rate",
        {"ok.csv": "a,b\n1,2\n"},
        ["ok.csv", "--rate", "-5"],
        "--rate must be a positive number of Hz (received -5.0)",
        2,
    ),
    Case(
        "rate-not-a-number",
        {"ok.csv": "a,b\n1,2\n"},
        ["ok.csv", "--rate", "fast"],
        "Invalid value for '--rate': Input should be a valid number, unable to parse string as a "
        "number (see chunkfit --help)",
        2,
    ),
    Case(
        "events-and-labels",
        {"ok.csv": "a,b\n1,2\n", "events.txt": "1\n"},
        ["ok.csv", "--events", "events.txt", "--label-column", "b"],
        "give either --events or --label-column, not both",
        2,
    ),
]


def _write(folder: Path, files: dict[str, str | bytes | None]) -> None:
    for name, text in files.items():
        if name.endswith(".h5"):
            with h5py.File(folder / name, "w") as f:
                f.create_dataset("signal", data=np.zeros((3, 1)))
        else:
            (folder / name).write_bytes(text if isinstance(text, bytes) else str(text).encode())


Run = tuple[Case, Path, "Future[CompletedProcess[str]]"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[tuple[str, str], Run]]:
    """Every case's CLI run, started together: each is a separate process in its own folder.

    Startup dominates each run, so running them side by side keeps this module fast; every test
    below still checks one scenario.
    """
    planned = [(case, backend) for case in BAD_DATA for backend in SUFFIX] + [
        (case, "zarr") for case in BAD_USAGE
    ]
    with ThreadPoolExecutor(max_workers=(os.cpu_count() or 2) + 1) as pool:
        out: dict[tuple[str, str], Run] = {}
        for case, backend in planned:
            folder = tmp_path_factory.mktemp(case.id)
            _write(folder, case.files)
            future = pool.submit(run_cli, "ingest", f"out{SUFFIX[backend]}", *case.args, cwd=folder)
            out[(case.id, backend)] = (case, folder, future)
        yield out


def _check(run: Run) -> None:
    case, folder, future = run
    result = future.result()
    assert result.returncode == case.code
    assert error_line(result) == f"chunkfit: error: {case.line}"
    assert sorted(p.name for p in folder.iterdir()) == sorted(case.files)


@pytest.mark.parametrize("case", [c.id for c in BAD_DATA])
def test_bad_input_exits_with_one_error_line_and_writes_nothing(
    runs: dict[tuple[str, str], Run], backend: str, case: str
) -> None:
    _check(runs[(case, backend)])


@pytest.mark.parametrize("case", [c.id for c in BAD_USAGE])
def test_bad_command_exits_with_one_error_line_and_writes_nothing(
    runs: dict[tuple[str, str], Run], case: str
) -> None:
    _check(runs[(case, "zarr")])


def test_store_path_without_a_store_suffix_is_refused(tmp_path: Path) -> None:
    (tmp_path / "ok.csv").write_text("a\n1\n")
    result = run_cli("ingest", "out", "ok.csv", cwd=tmp_path)
    assert (result.returncode, error_line(result)) == (
        2,
        "chunkfit: error: out: a store path ends in .zarr (zarr directory) or .h5/.hdf5 (HDF5 "
        "file); rename it",
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ok.csv"]


def test_zarr_store_path_that_is_a_file_is_refused_on_append(tmp_path: Path) -> None:
    (tmp_path / "ok.csv").write_text("a\n1\n")
    (tmp_path / "file.zarr").write_text("I am a file")
    result = run_cli("ingest", "--append", "file.zarr", "ok.csv", cwd=tmp_path)
    assert (result.returncode, error_line(result)) == (
        1,
        "chunkfit: error: file.zarr: a zarr store is a directory, this is a file",
    )
    assert (tmp_path / "file.zarr").read_text() == "I am a file"


def test_existing_store_without_append_is_refused_and_left_alone(
    tmp_path: Path, backend: str
) -> None:
    store = tmp_path / f"s{SUFFIX[backend]}"
    src = write_csv(tmp_path / "ok.csv", np.ones((3, 1)), names=["x"])
    chunkfit.ingest(store, [str(src)], IngestOptions(rate=1.0))
    before = snapshot(store)
    result = run_cli("ingest", store.name, "ok.csv", cwd=tmp_path)
    assert (result.returncode, error_line(result)) == (
        2,
        f"chunkfit: error: {store.name}: already exists; pass --append to add recordings, or "
        "choose a new path",
    )
    assert snapshot(store) == before


def test_append_to_a_missing_store_is_refused(tmp_path: Path, backend: str) -> None:
    (tmp_path / "ok.csv").write_text("a\n1\n")
    name = f"new{SUFFIX[backend]}"
    result = run_cli("ingest", "--append", name, "ok.csv", cwd=tmp_path)
    assert (result.returncode, error_line(result)) == (
        1,
        f"chunkfit: error: {name}: store not found; create it with `chunkfit ingest {name} SOURCE`",
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ok.csv"]


@pytest.fixture
def stored(tmp_path: Path, backend: str) -> Path:
    """A store of 50 rows, channels a and b, 10 Hz, with events, made by the library."""
    src = write_csv(
        tmp_path / "first.csv",
        np.arange(100.0).reshape(50, 2),
        names=["a", "b"],
        times=np.arange(50) / 10,
    )
    events = tmp_path / "first_events.txt"
    events.write_text("3\n40\n")
    store = tmp_path / f"s{SUFFIX[backend]}"
    chunkfit.ingest(store, [str(src)], IngestOptions(time_column="t", events=str(events)))
    return store


def _assert_refused_append_changed_nothing(
    stored: Path, args: list[str], code: int, line: str
) -> None:
    before_files, before = snapshot(stored), contents(stored)
    result = run_cli("ingest", "--append", stored.name, *args, cwd=stored.parent)
    assert (result.returncode, error_line(result)) == (code, f"chunkfit: error: {line}")
    assert snapshot(stored) == before_files
    after = contents(stored)
    np.testing.assert_array_equal(after["signal"], before["signal"])
    assert after["attrs"] == before["attrs"]


def test_append_with_other_channel_names_is_refused_and_changes_nothing(stored: Path) -> None:
    write_csv(
        stored.parent / "other.csv", np.zeros((5, 2)), names=["a", "z"], times=np.arange(5) / 10
    )
    _assert_refused_append_changed_nothing(
        stored,
        ["other.csv", "--time-column", "t"],
        1,
        "other.csv: channels ['a', 'z'] differ from the store's ['a', 'b']; append only "
        "recordings with the same channels (choose them with --columns)",
    )


def test_append_with_another_channel_count_is_refused_and_changes_nothing(stored: Path) -> None:
    write_csv(stored.parent / "one.csv", np.zeros((5, 1)), names=["a"], times=np.arange(5) / 10)
    _assert_refused_append_changed_nothing(
        stored,
        ["one.csv", "--time-column", "t"],
        1,
        "one.csv: channels ['a'] differ from the store's ['a', 'b']; append only recordings with "
        "the same channels (choose them with --columns)",
    )


def test_append_with_events_outside_the_new_signal_is_refused_and_changes_nothing(
    stored: Path,
) -> None:
    write_csv(
        stored.parent / "more.csv", np.zeros((5, 2)), names=["a", "b"], times=np.arange(5) / 10
    )
    (stored.parent / "late.txt").write_text("1\n5\n")
    _assert_refused_append_changed_nothing(
        stored,
        ["more.csv", "--time-column", "t", "--events", "late.txt"],
        1,
        "late.txt:2: event at sample 5 is outside the signal (0 to 4 samples in this ingest); fix "
        "or drop the marker",
    )


def test_append_with_bad_data_late_in_the_source_changes_nothing(stored: Path) -> None:
    rows = "".join(f"{i / 10},{i},{i}\n" for i in range(2000)) + "200.0,1,x\n"
    (stored.parent / "late.csv").write_text("t,a,b\n" + rows)
    _assert_refused_append_changed_nothing(
        stored,
        ["late.csv", "--time-column", "t"],
        1,
        "late.csv:2002:3: 'x' in column 'b' is not a number; fix the value or leave the column "
        "out with --columns",
    )


def test_info_on_a_folder_that_is_not_a_store_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "empty.zarr").mkdir()
    result = run_cli("info", "empty.zarr", cwd=tmp_path)
    assert result.returncode == 1
    assert error_line(result).startswith("chunkfit: error: empty.zarr: not a zarr v3 group")

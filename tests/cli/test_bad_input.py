"""The bad-input catalogue: every user mistake across ingest, info, train, evaluate and predict.

Each case builds its inputs in a folder of its own and runs the real CLI there, so messages name
files relatively. Each must exit non-zero with exactly one stderr line that names the problem and
the place (file, line, column or flag), print no traceback, and leave the folder exactly as it was:
no partial store, run folder, output or temporary, and nothing already stored changed.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import shutil
import zipfile
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from subprocess import CompletedProcess

import h5py
import numpy as np
import pytest
import zarr
from scoring_support import trained
from support import error_line, make_store, run_cli, tree

from chunkfit._version import __version__

Maker = Callable[[Path], None]


# -- what a case folder can hold -------------------------------------------------------------------


def text(content: str | bytes) -> Maker:
    data = content if isinstance(content, bytes) else content.encode()

    def make(path: Path) -> None:
        path.write_bytes(data)

    return make


def folder(path: Path) -> None:
    path.mkdir()


def workbook(path: Path) -> None:
    """A spreadsheet saved as .csv by mistake: a zip archive (as .xlsx files are)."""
    with zipfile.ZipFile(path, "w") as book:
        book.writestr("xl/worksheets/sheet1.xml", "<worksheet><row><c>1</c></row></worksheet>")


def gzip_cut(path: Path) -> None:
    """A gzipped CSV cut off in the middle of its compressed stream."""
    data = gzip.compress(b"a,b\n" + b"".join(b"%d,%d\n" % (i, -i) for i in range(4000)))
    path.write_bytes(data[: len(data) // 2])


def npy(array: np.ndarray) -> Maker:
    return lambda path: np.save(path, array, allow_pickle=array.dtype.hasobject)


def npy_cut(path: Path) -> None:
    np.save(path, np.arange(100.0))
    path.write_bytes(path.read_bytes()[:-40])


def store(*, events: bool = True, samples: int = 400) -> Maker:
    """A store of one channel ``x`` at 10 Hz (zarr or HDF5 by suffix), events every 20 samples."""

    def make(path: Path) -> None:
        x = np.sin(np.arange(samples) / 3).astype(np.float32)[:, None]
        make_store(
            path,
            x,
            events=list(range(5, samples, 20)) if events else None,
            rate=10.0,
            chunk=64,
            channels=["x"],
        )

    return make


def labels_store(path: Path) -> None:
    """A store of per-sample labels and no event markers."""
    x = np.sin(np.arange(400) / 3).astype(np.float32)[:, None]
    make_store(path, x, labels=(np.arange(400) % 40 < 4).astype(np.int64), rate=10.0)


def empty_store(path: Path) -> None:
    make_store(
        path,
        np.zeros((0, 1), np.float32),
        segments=[],
        events=[],
        rate=10.0,
        chunk=64,
        channels=["x"],
    )


def edited(change: Callable[[dict], None]) -> Maker:
    """A good store whose ``chunkfit`` attribute was then edited by hand (zarr.json or HDF5)."""

    def make(path: Path) -> None:
        store()(path)
        if path.suffix == ".zarr":
            meta = path / "zarr.json"
            doc = json.loads(meta.read_text())
            change(doc["attributes"]["chunkfit"])
            meta.write_text(json.dumps(doc))
        else:
            with h5py.File(path, "r+") as f:
                attrs = json.loads(f.attrs["chunkfit"])
                change(attrs)
                f.attrs["chunkfit"] = json.dumps(attrs)

    return make


def replaced(name: str, data: np.ndarray) -> Maker:
    """A good store whose array ``name`` was replaced by hand with ``data``."""

    def make(path: Path) -> None:
        store()(path)
        if path.suffix == ".zarr":
            shutil.rmtree(path / name)
            zarr.open_group(str(path), mode="r+").create_array(name, data=data)
        else:
            with h5py.File(path, "r+") as f:
                del f[name]
                f.create_dataset(name, data=data)

    return make


def hdf5_attribute(raw: str) -> Maker:
    def make(path: Path) -> None:
        store()(path)
        with h5py.File(path, "r+") as f:
            f.attrs["chunkfit"] = raw

    return make


def zarr_meta(name: str, raw: str) -> Maker:
    def make(path: Path) -> None:
        store()(path)
        (path / name / "zarr.json").write_text(raw)

    return make


def run_folder(path: Path) -> None:
    """A copy of the session's trained run (window 16, channel x, events)."""
    shutil.copytree(RUN, path)


def edited_run(change: Callable[[dict], None]) -> Maker:
    def make(path: Path) -> None:
        run_folder(path)
        meta = json.loads((path / "run.json").read_text())
        change(meta)
        (path / "run.json").write_text(json.dumps(meta))

    return make


MODELS = """
def raises(window, n_channels, n_classes):
    raise ValueError("filters must be even, got 7")

def needs_depth(window, depth):
    raise AssertionError("never called")
"""

RUN: Path  # set by the ``runs`` fixture before any case is built


@dataclasses.dataclass(frozen=True)
class Case:
    """Files to create (name -> maker), the command, and the error line after "chunkfit: error:"."""

    id: str
    files: dict[str, Maker]
    args: list[str]
    line: str
    code: int = 1
    xfail: str | None = None  # a known bug outside this catalogue's files, with where to fix it


OK_CSV = text("a,b\n1,2\n3,4\n")
SUPPORTED = (
    "CSV/TSV text (.csv .tsv .txt .log, optionally .gz), .npy, HDF5 datasets (file.h5:/dataset), "
    "WFDB (.hea), EDF/BDF (.edf .bdf), MiniSEED (.mseed .miniseed .ms), Parquet (.parquet), "
    "WAV/FLAC (.wav .flac) or - for standard input"
)
WINDOW = ["--window", "16", "--chunk", "256", "--batch-size", "32", "--epochs", "1"]

CASES = [
    # -- ingest: malformed CSVs --------------------------------------------------------------------
    Case(
        "ragged-row",
        {"ragged.csv": text("a,b\n1,2\n3\n")},
        ["ingest", "s.zarr", "ragged.csv", "--rate", "1"],
        "ragged.csv:3: ragged row: expected 2 fields separated by ',', found 1; fix or remove the "
        "line",
    ),
    Case(
        "unclosed-quote",
        {"quote.csv": text('a,b\n1,2\n3,"4\n5,6\n')},
        ["ingest", "s.zarr", "quote.csv", "--rate", "1"],
        "quote.csv:3:2: a double quote opened here is never closed; close it or remove it",
    ),
    Case(
        "quoted-field-holding-the-delimiter",
        {"quoted.csv": text('a,b\n1,2\n"x,y",3\n')},
        ["ingest", "s.zarr", "quoted.csv", "--rate", "1"],
        "quoted.csv:3:1: 'x,y' in column 'a' is not a number; fix the value or leave the column "
        "out with --columns",
    ),
    Case(
        "decimal-comma",
        {"comma.csv": text("a;b\n1,5;2,5\n3,5;4,5\n")},
        ["ingest", "s.zarr", "comma.csv", "--rate", "1"],
        "comma.csv:2:1: '1,5' in column 'a' uses a decimal comma; chunkfit reads '.' as the "
        "decimal point: convert the numbers (e.g. 1,5 -> 1.5)",
    ),
    Case(
        "wrong-delimiter-flag",
        {"semi.csv": text("a;b\n1;2\n3;4\n")},
        ["ingest", "s.zarr", "semi.csv", "--rate", "1", "--delimiter", ","],
        "semi.csv: no numeric channel column found (columns: a;b); choose them with --columns, or "
        "pass --delimiter ';' (the first line holds ';')",
    ),
    Case(
        "header-only",
        {"header.csv": text("a,b\n")},
        ["ingest", "s.zarr", "header.csv", "--rate", "1"],
        "header.csv: empty source: no data rows to ingest",
    ),
    Case(
        "blank-lines-only",
        {"blank.csv": text("\n\n\n")},
        ["ingest", "s.zarr", "blank.csv", "--rate", "1"],
        "blank.csv: empty source: only blank lines, no rows to ingest",
    ),
    Case(
        "whitespace-only",
        {"spaces.csv": text("   \n \t \n")},
        ["ingest", "s.zarr", "spaces.csv", "--rate", "1"],
        "spaces.csv: empty source: only blank lines, no rows to ingest",
    ),
    Case(
        "workbook-named-csv",
        {"book.csv": workbook},
        ["ingest", "s.zarr", "book.csv", "--rate", "1"],
        "book.csv:1: binary data or UTF-16 text, not a CSV log; save it as UTF-8 text",
    ),
    Case(
        "utf16-text",
        {"utf16.csv": text("a,b\n1,2\n".encode("utf-16"))},
        ["ingest", "s.zarr", "utf16.csv", "--rate", "1"],
        "utf16.csv:1: binary data or UTF-16 text, not a CSV log; save it as UTF-8 text",
    ),
    Case(
        "latin1-header",
        {"latin1.csv": text("t\N{LATIN SMALL LETTER E WITH ACUTE}mp,b\n1,2\n".encode("latin-1"))},
        ["ingest", "s.zarr", "latin1.csv", "--rate", "1"],
        "latin1.csv:1: not UTF-8 text (byte 2 of the line); re-save the file as UTF-8",
    ),
    Case(
        "latin1-value",
        {"latin1.csv": text("a,b\n1,2\n3,\N{MICRO SIGN}4\n".encode("latin-1"))},
        ["ingest", "s.zarr", "latin1.csv", "--rate", "1"],
        "latin1.csv:3: not UTF-8 text (byte 3 of the line); re-save the file as UTF-8",
    ),
    Case(
        "nul-byte-in-a-row",
        {"nul.csv": text(b"a,b\n1,2\n3,4\x00\n")},
        ["ingest", "s.zarr", "nul.csv", "--rate", "1"],
        "nul.csv:3: binary data or UTF-16 text, not a CSV log; save it as UTF-8 text",
    ),
    Case(
        "truncated-gzip",
        {"cut.csv.gz": gzip_cut},
        ["ingest", "s.zarr", "cut.csv.gz", "--rate", "1"],
        "cut.csv.gz: the gzip data is truncated or damaged (Compressed file ended before the "
        "end-of-stream marker was reached); copy the file again",
    ),
    Case(
        "plain-text-named-gz",
        {"plain.csv.gz": OK_CSV},
        ["ingest", "s.zarr", "plain.csv.gz", "--rate", "1"],
        "plain.csv.gz: not gzip data (Not a gzipped file (b'a,')); if the file is plain text, "
        "remove the .gz suffix",
    ),
    Case(
        "value-beyond-float64",
        {"huge.csv": text("a\n1\n1e400\n")},
        ["ingest", "s.zarr", "huge.csv", "--rate", "1"],
        "huge.csv:3:1: '1e400' in channel 'a' is beyond float32 storage (largest magnitude "
        "3.403e+38); rescale the column",
    ),
    Case(
        "text-in-the-time-column",
        {"clock.csv": text("t,a\n0,1\n1,2\nnoon,3\n")},
        ["ingest", "s.zarr", "clock.csv", "--time-column", "t"],
        "clock.csv:4:1: 'noon' in time column 't' is not a number; fix the value",
    ),
    Case(
        "time-column-of-words",
        {"clock.csv": text("t,a\nstart,1\nstop,2\n")},
        ["ingest", "s.zarr", "clock.csv", "--time-column", "t"],
        "clock.csv:2:1: 'start' in time column 't' is neither seconds nor an ISO 8601 timestamp; "
        "fix the value, or pass --rate instead of --time-column",
    ),
    Case(
        "unnamed-column",
        {"trailing.csv": text("a,b,\n1,2,\n3,4,\n")},
        ["ingest", "s.zarr", "trailing.csv", "--rate", "1"],
        "trailing.csv:1:3: column 3 has no name in the header; name it, or choose the channels "
        "with --columns",
    ),
    # -- ingest: other sources, flags and paths ----------------------------------------------------
    Case(
        "column-named-twice",
        {"ok.csv": OK_CSV},
        ["ingest", "s.zarr", "ok.csv", "--rate", "1", "--columns", "a,0"],
        "ok.csv:1: --columns names column 'a' twice; name each channel once",
        2,
    ),
    Case(
        "time-and-label-in-one-column",
        {"ok.csv": OK_CSV},
        ["ingest", "s.zarr", "ok.csv", "--time-column", "a", "--label-column", "a"],
        "ok.csv:1: --time-column and --label-column both name column 'a'; give two columns",
        2,
    ),
    Case(
        "label-column-among-the-channels",
        {"ok.csv": OK_CSV},
        ["ingest", "s.zarr", "ok.csv", "--rate", "1", "--label-column", "b", "--columns", "a,b"],
        "ok.csv:1: --columns includes the label column 'b': the model would see the answer; leave "
        "it out of --columns",
        2,
    ),
    Case(
        "npy-of-python-objects",
        {"objects.npy": npy(np.array([{"a": 1}, None], dtype=object))},
        ["ingest", "s.zarr", "objects.npy", "--rate", "1"],
        "objects.npy: the array holds Python objects (dtype object), which load only by "
        "unpickling; chunkfit never unpickles a file: save a plain numeric array",
    ),
    Case(
        "truncated-npy",
        {"cut.npy": npy_cut},
        ["ingest", "s.zarr", "cut.npy", "--rate", "1"],
        "cut.npy: truncated .npy file: its header promises 928 bytes, the file has 888; copy it "
        "again",
    ),
    Case(
        "npy-beyond-float32",
        {"big.npy": npy(np.array([[1.0], [1e300]]))},
        ["ingest", "s.zarr", "big.npy", "--rate", "1"],
        "big.npy: row 1 (counted from 0), column 0 (counted from 0): 1e+300 in channel 'ch0' is "
        "beyond float32 storage (largest magnitude 3.403e+38); rescale the column",
    ),
    Case(
        "source-is-a-directory",
        {"logs.csv": folder},
        ["ingest", "s.zarr", "logs.csv", "--rate", "1"],
        f"logs.csv: is a directory, not a source file ({SUPPORTED})",
    ),
    Case(
        "events-file-is-a-directory",
        {"ok.csv": OK_CSV, "markers": folder},
        ["ingest", "s.zarr", "ok.csv", "--rate", "1", "--events", "markers"],
        "markers: is a directory; --events takes a file of markers, one per line",
    ),
    Case(
        "event-time-beyond-float64",
        {"ok.csv": OK_CSV, "events.txt": text("1e400\n")},
        ["ingest", "s.zarr", "ok.csv", "--rate", "1", "--events", "events.txt"],
        "events.txt:1: '1e400' is not a finite time; fix or drop the marker",
    ),
    Case(
        "store-inside-a-file",
        {"ok.csv": OK_CSV, "notes": text("mine")},
        ["ingest", "notes/s.zarr", "ok.csv", "--rate", "1"],
        "notes/s.zarr: notes is a file, not a folder; choose another path",
        2,
    ),
    Case(
        "events-with-label-column",
        {"ok.csv": OK_CSV, "events.txt": text("1\n")},
        ["ingest", "s.zarr", "ok.csv", "--events", "events.txt", "--label-column", "b"],
        "give either --events or --label-column, not both",
        2,
    ),
    Case(
        "nan-policy-bogus",
        {"ok.csv": OK_CSV},
        ["ingest", "s.zarr", "ok.csv", "--nan", "bogus"],
        "--nan must be one of refuse, keep, interpolate (received 'bogus')",
        2,
    ),
    Case(
        "chunk-samples-zero",
        {"ok.csv": OK_CSV},
        ["ingest", "s.zarr", "ok.csv", "--rate", "1", "--chunk-samples", "0"],
        "--chunk-samples must be a positive integer (received 0)",
        2,
    ),
    Case(
        "unknown-codec",
        {"ok.csv": OK_CSV},
        ["ingest", "s.zarr", "ok.csv", "--rate", "1", "--codec", "gzip"],
        "--codec must be zstd, lz4 or none (received 'gzip')",
        2,
    ),
    Case(
        "names-for-a-csv-with-a-header",
        {"ok.csv": OK_CSV},
        ["ingest", "s.zarr", "ok.csv", "--rate", "1", "--names", "x,y"],
        "ok.csv:1: --names names the columns of a CSV without a header line, and this one has a "
        "header; drop --names (or pass --no-header if line 1 is data)",
        2,
    ),
    # -- info: things that are not stores, and stores whose attributes or arrays are malformed -----
    Case(
        "directory-that-is-not-a-store",
        {"empty.zarr": folder},
        ["info", "empty.zarr"],
        "empty.zarr: not a zarr v3 group (No group found in store 'empty.zarr' at path ''); "
        "create a store with `chunkfit ingest`",
    ),
    Case(
        "hdf5-store-that-is-a-directory",
        {"s.h5": folder},
        ["info", "s.h5"],
        "s.h5: an HDF5 store is a file, this is a directory",
    ),
    Case(
        "zarr-store-that-is-a-file",
        {"s.zarr": OK_CSV},
        ["info", "s.zarr"],
        "s.zarr: a zarr store is a directory, this is a file",
    ),
    Case(
        "stats-not-a-mapping",
        {"s.zarr": edited(lambda a: a.update(stats="lots"))},
        ["info", "s.zarr"],
        "s.zarr: not a valid chunkfit store: attribute stats must map channel names to their "
        "statistics (found 'lots')",
    ),
    Case(
        "stats-with-a-word-for-a-count",
        {"s.h5": edited(lambda a: a["stats"].update(x={"count": "many"}))},
        ["info", "s.h5"],
        "s.h5: not a valid chunkfit store: stats of channel 'x' must hold a count and numbers "
        "mean, std, min, max (found {'count': 'many'})",
    ),
    Case(
        "sources-not-records",
        {"s.h5": edited(lambda a: a.update(sources=[1, 2]))},
        ["info", "s.h5"],
        "s.h5: not a valid chunkfit store: attribute sources must be a list of records with a "
        "name (found [1, 2])",
    ),
    Case(
        "channels-disagree-with-the-signal",
        {"s.zarr": edited(lambda a: a.update(channels=["x", "y"]))},
        ["info", "s.zarr"],
        "s.zarr: not a valid chunkfit store: signal shape (400, 1) does not match 2 channel "
        "name(s)",
    ),
    Case(
        "has-events-not-a-boolean",
        {"s.zarr": edited(lambda a: a.update(has_events="no"))},
        ["info", "s.zarr"],
        "s.zarr: not a valid chunkfit store: has_events must be true or false (found 'no')",
    ),
    Case(
        "rate-that-is-a-word",
        {"s.h5": edited(lambda a: a.update(sample_rate="fast"))},
        ["info", "s.h5"],
        "s.h5: not a valid chunkfit store: sample_rate must be a positive number or null (found "
        "'fast')",
    ),
    Case(
        "format-from-the-future",
        {"s.zarr": edited(lambda a: a.update(format_version=2))},
        ["info", "s.zarr"],
        "s.zarr: not a valid chunkfit store: format_version is 2, this chunkfit reads 1",
    ),
    Case(
        "segments-past-the-end",
        {"s.h5": replaced("segments", np.array([[0, 5000]], dtype=np.int64))},
        ["info", "s.h5"],
        "s.h5: not a valid chunkfit store: segments out of range [0, 400) or empty",
    ),
    Case(
        "events-unsorted",
        {"s.zarr": replaced("events", np.array([50, 5, 200], dtype=np.int64))},
        ["info", "s.zarr"],
        "s.zarr: not a valid chunkfit store: events must be sorted sample indices in [0, 400)",
    ),
    Case(
        "signal-of-the-wrong-dtype",
        {"s.h5": replaced("signal", np.zeros((400, 1), dtype=np.int16))},
        ["info", "s.h5"],
        "s.h5: not a valid chunkfit store: signal dtype is int16, expected float32",
    ),
    Case(
        "hdf5-attribute-not-json",
        {"s.h5": hdf5_attribute("{channels: x")},
        ["info", "s.h5"],
        "s.h5: attribute 'chunkfit' is not valid JSON",
    ),
    Case(
        "zarr-array-metadata-not-json",
        {"s.zarr": zarr_meta("signal", "{oops")},
        ["info", "s.zarr"],
        "s.zarr: not a valid chunkfit store: signal/zarr.json cannot be read (Expecting property "
        "name enclosed in double quotes: line 1 column 2 (char 1))",
    ),
    # -- train -------------------------------------------------------------------------------------
    Case(
        "window-zero",
        {"s.zarr": store()},
        ["train", "s.zarr", "--window", "0", "--out", "run"],
        "--window must be a positive integer (received 0)",
        2,
    ),
    Case(
        "chunk-smaller-than-the-batch",
        {"s.zarr": store()},
        ["train", "s.zarr", "--chunk", "64", "--batch-size", "128", "--out", "run"],
        "chunk must be at least the batch size (received chunk=64, batch_size=128); raise --chunk "
        "or lower --batch-size",
        2,
    ),
    Case(
        "validation-above-one",
        {"s.zarr": store()},
        ["train", "s.zarr", "--validation", "1.5", "--out", "run"],
        "--validation must be a fraction in [0, 1) (received 1.5)",
        2,
    ),
    Case(
        "negative-epochs",
        {"s.zarr": store()},
        ["train", "s.zarr", "--epochs", "-1", "--out", "run"],
        "--epochs must be a whole number of at least 1: a run of 0 epochs would write an "
        "untrained model and threshold (received -1)",
        2,
    ),
    Case(
        "zero-epochs",
        {"s.zarr": store()},
        ["train", "s.zarr", "--epochs", "0", "--out", "run"],
        "--epochs must be a whole number of at least 1: a run of 0 epochs would write an "
        "untrained model and threshold (received 0)",
        2,
    ),
    Case(
        "negative-compute-threads",
        {"s.zarr": store()},
        ["train", "s.zarr", "--compute-threads", "-1", "--out", "run"],
        "--compute-threads must be 0 (all cores) or a positive integer (received -1)",
        2,
    ),
    Case(
        "label-last-without-labels",
        {"s.h5": store()},
        ["train", "s.h5", "--label", "last", "--out", "run"],
        "s.h5: label rule last needs per-sample labels, but the store has none; it has events: "
        "use --label any-event",
    ),
    Case(
        "unknown-model-name",
        {"s.zarr": store()},
        ["train", "s.zarr", "--model", "resnet9000", "--out", "run"],
        "unknown model 'resnet9000': use a built-in (baseline-cnn, dilated-resnet, "
        "inception-time, picker), a .keras file or module:function",
    ),
    Case(
        "pick-width-without-picker",
        {"s.zarr": store()},
        ["train", "s.zarr", "--pick-width", "5", *WINDOW, "--out", "run"],
        "--pick-width applies to --model picker only (received --model baseline-cnn); drop it",
        code=2,
    ),
    Case(
        "picker-with-augmentation",
        {"s.zarr": store()},
        ["train", "s.zarr", "--model", "picker", "--augment", "flip", *WINDOW, "--out", "run"],
        "--model picker learns per-sample targets, which --augment, --oversample and "
        "--label-margin (made for window classes) do not move with the window; drop them",
        code=2,
    ),
    Case(
        "picker-on-a-store-without-events",
        {"s.zarr": labels_store},
        [
            "train",
            "s.zarr",
            "--model",
            "picker",
            "--label",
            "majority",
            "--validation",
            "0",
            *WINDOW,
            "--out",
            "run",
        ],  # fmt: skip
        "s.zarr: --model picker learns from event markers, and the store has none; ingest its "
        "events (or use a classifier with --label)",
        code=2,
    ),
    Case(
        "model-spec-without-module",
        {"s.zarr": store()},
        ["train", "s.zarr", "--model", ":build", "--out", "run"],
        "model ':build' is not module:function; name a Python module and a function in it, e.g. "
        "my_models:build",
    ),
    Case(
        "keras-file-that-is-not-one",
        {"s.zarr": store(), "model.keras": text("not a model")},
        ["train", "s.zarr", "--model", "model.keras", "--out", "run"],
        "model.keras: not a .keras model (a .keras file is a zip archive, this file is not)",
    ),
    Case(
        "keras-path-that-is-a-directory",
        {"s.zarr": store(), "model.keras": folder},
        ["train", "s.zarr", "--model", "model.keras", "--out", "run"],
        "model.keras: is a directory, not a .keras model file",
    ),
    Case(
        "model-function-that-raises",
        {"s.zarr": store(), "my_models.py": text(MODELS)},
        ["train", "s.zarr", *WINDOW, "--model", "my_models:raises", "--out", "run"],
        "model factory my_models:raises raised ValueError: filters must be even, got 7",
    ),
    Case(
        "model-function-that-does-not-exist",
        {"s.zarr": store(), "my_models.py": text(MODELS)},
        ["train", "s.zarr", *WINDOW, "--model", "my_models:nothere", "--out", "run"],
        "model 'my_models:nothere' cannot be imported: module 'my_models' has no attribute "
        "'nothere'",
    ),
    Case(
        "model-function-wanting-an-argument",
        {"s.zarr": store(), "my_models.py": text(MODELS)},
        ["train", "s.zarr", *WINDOW, "--model", "my_models:needs_depth", "--out", "run"],
        "model factory my_models:needs_depth needs argument(s) depth, but chunkfit passes only "
        "window, n_channels, n_classes, input_shape; give them default values",
    ),
    Case(
        "train-on-an-empty-store",
        {"empty.zarr": empty_store},
        ["train", "empty.zarr", "--out", "run"],
        "empty.zarr: the store has no segments, so there are no windows to train on",
    ),
    Case(
        "run-folder-that-is-a-file",
        {"s.zarr": store(), "run": text("mine")},
        ["train", "s.zarr", *WINDOW, "--out", "run"],
        "run: the run folder is a file; use another --out",
    ),
    # -- evaluate ----------------------------------------------------------------------------------
    Case(
        "run-folder-without-a-model",
        {"s.zarr": store(), "unfinished": folder},
        ["evaluate", "unfinished", "s.zarr"],
        "unfinished: the run folder has no model.keras (training did not finish?); pass a "
        "finished run",
    ),
    Case(
        "evaluate-keras-file-that-is-not-one",
        {"s.zarr": store(), "m.keras": text(b"PK not really")},
        ["evaluate", "m.keras", "s.zarr"],
        "m.keras: not a .keras model (a .keras file is a zip archive, this file is not)",
    ),
    Case(
        "run-json-config-not-an-object",
        {"s.zarr": store(), "run": edited_run(lambda m: m.update(config=[16]))},
        ["evaluate", "run", "s.zarr"],
        "run/run.json: not a valid run.json (config is not an object); pass the .keras file "
        "instead",
    ),
    Case(
        "plot-path-that-is-a-directory",
        {"s.zarr": store(), "run": run_folder, "plots": folder},
        ["evaluate", "run", "s.zarr", "--plot", "plots"],
        "plots: is a directory; --plot takes a file name",
    ),
    Case(
        "threshold-not-a-number",
        {"s.zarr": store(), "run": run_folder},
        ["evaluate", "run", "s.zarr", "--threshold", "nan"],
        "--threshold must be in [0, 1] (received nan)",
        2,
    ),
    Case(
        "evaluate-an-empty-store",
        {"empty.zarr": empty_store, "run": run_folder},
        ["evaluate", "run", "empty.zarr", "--plot", "eval.png"],
        "empty.zarr: the store holds no samples, so there is no window to score",
    ),
    # -- predict -----------------------------------------------------------------------------------
    Case(
        "predict-to-an-existing-output",
        {"s.zarr": store(), "run": run_folder, "scores.h5": text("mine")},
        ["predict", "run", "s.zarr", "--out", "scores.h5"],
        "scores.h5: already exists; pass --overwrite to replace it",
    ),
    Case(
        "events-output-that-is-a-directory",
        {"s.zarr": store(), "run": run_folder, "events": folder},
        [
            "predict",
            "run",
            "s.zarr",
            "--out",
            "scores.zarr",
            "--events-out",
            "events",
            "--overwrite",
        ],
        "events: is a directory; choose a file name",
    ),
    Case(
        "predict-on-a-store-that-is-a-run-folder",
        {"run": run_folder},
        ["predict", "run", "run", "--out", "scores.zarr"],
        "run: not a zarr v3 group (No group found in store 'run' at path ''); create a store with "
        "`chunkfit ingest`",
    ),
]


Result = tuple[Case, Path, dict[str, bytes | None], "Future[CompletedProcess[str]]"]


def _needs_a_model(case: Case) -> bool:
    """Whether the command gets as far as TensorFlow (a few seconds) before it is refused."""
    return (
        any(a.startswith("my_models:") for a in case.args) or case.id == "evaluate-an-empty-store"
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Result]]:
    """Every case's command, started together three at a time, each in its own folder.

    Most cases are refused before TensorFlow loads (a fraction of a second); the few that need a
    model take a few seconds, so running them side by side keeps the module short.
    """
    global RUN
    RUN = trained(tmp_path_factory.getbasetemp()).run
    with ThreadPoolExecutor(max_workers=3) as pool:
        out: dict[str, Result] = {}
        for case in sorted(CASES, key=_needs_a_model, reverse=True):  # the slow ones first
            where = tmp_path_factory.mktemp(case.id)
            for name, make in case.files.items():
                make(where / name)
            out[case.id] = (case, where, tree(where), pool.submit(run_cli, *case.args, cwd=where))
        yield out


def test_the_catalogue_holds_distinct_cases() -> None:
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(c.id, marks=pytest.mark.xfail(strict=True, reason=c.xfail))
        if c.xfail
        else c.id
        for c in CASES
    ],
)
def test_bad_input_is_refused_with_one_line_naming_it(runs: dict[str, Result], case: str) -> None:
    spec, _, _, future = runs[case]
    result = future.result()
    assert (result.returncode, error_line(result)) == (spec.code, f"chunkfit: error: {spec.line}")


@pytest.mark.parametrize("case", [c.id for c in CASES])
def test_bad_input_leaves_the_folder_as_it_was(runs: dict[str, Result], case: str) -> None:
    _, where, before, future = runs[case]
    future.result()
    assert tree(where) == before


@pytest.mark.parametrize("case", [c.id for c in CASES])
def test_bad_input_prints_nothing_on_stdout(runs: dict[str, Result], case: str) -> None:
    assert runs[case][3].result().stdout == ""


def test_version_prints_the_version_and_exits_0() -> None:
    result = run_cli("--version")
    assert (result.returncode, result.stdout, result.stderr) == (0, f"chunkfit {__version__}\n", "")

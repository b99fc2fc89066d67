"""Faults that are not the user's typing: damaged stores, a full disk, read-only folders, a store
that changed since a run was made.

Each case damages real files and runs the real CLI in a folder of its own. A refused command prints
one line naming what is wrong and where, and leaves every file as it was: a failed ingest leaves no
store or temporary behind (a new store) or the store byte for byte (an append). The full disk is a
file size limit (``ulimit -f``) on the subprocess; read-only folders are file modes that bind even
root (see ``support.CONFINE``).
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import stat
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from subprocess import CompletedProcess

import numpy as np
import pytest
from scoring_support import trained
from support import error_line, make_store, run_cli, tree

import chunkfit
from chunkfit import IngestOptions

WINDOW = 16  # the trained run's window
TRAIN = [
    "--window",
    str(WINDOW),
    "--chunk",
    "256",
    "--batch-size",
    "32",
    "--epochs",
    "1",
    "--out",
    "run",
]
CHUNK = 64  # samples per stored chunk, so the small stores have many


def event_store(path: Path) -> None:
    """1,200 samples of channel ``x`` at 10 Hz in chunks of 64, an event every 20 samples."""
    x = np.sin(np.arange(1200) / 3).astype(np.float32)[:, None]
    make_store(path, x, events=list(range(5, 1200, 20)), rate=10.0, chunk=CHUNK, channels=["x"])


def deleted_chunk(path: Path) -> None:
    event_store(path)
    (path / "signal" / "c" / "5" / "0").unlink()


def corrupt_chunk(path: Path) -> None:
    event_store(path)
    (path / "signal" / "c" / "5" / "0").write_bytes(bytes(range(256)) * 4)


def truncated_hdf5(path: Path) -> None:
    event_store(path)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def corrupt_hdf5_chunk(path: Path) -> None:
    """Garbage over the compressed bytes of the sixth signal chunk, inside an intact HDF5 file."""
    import h5py

    event_store(path)
    with h5py.File(path, "r") as f:
        info = f["signal"].id.get_chunk_info(5)
    with open(path, "r+b") as f:
        f.seek(info.byte_offset)
        f.write(bytes(range(256)) * (info.size // 256 + 1))


def two_channel_store(path: Path) -> None:
    """300 samples of channels a and b at 100 Hz: what the big CSV is appended to."""
    make_store(path, np.zeros((300, 2), np.float32), rate=100.0, chunk=65_536, channels=["a", "b"])


def big_csv(path: Path) -> None:
    """20,000 rows of two noisy channels: a stored chunk of them compresses to over 100 kB."""
    if "big.csv" not in SHARED:
        rng = np.random.default_rng(3)
        rows = rng.normal(size=(20_000, 2))
        SHARED["big.csv"] = path.parent.parent / "big.csv"
        SHARED["big.csv"].write_text(
            "a,b\n" + "\n".join(f"{a!r},{b!r}" for a, b in rows.tolist()) + "\n"
        )
    shutil.copyfile(SHARED["big.csv"], path)


def small_csv(path: Path) -> None:
    path.write_text("a,b\n1,2\n3,4\n")


def run_folder(path: Path) -> None:
    shutil.copytree(SHARED["run"], path)


def grown_store(path: Path) -> None:
    """The run's training store with 500 more samples appended since the run was made."""
    shutil.copytree(SHARED["store"], path)
    more = path.parent / "more.csv"
    more.write_text("x\n" + "\n".join(str(np.sin(i)) for i in range(500)) + "\n")
    chunkfit.ingest(path, [str(more)], IngestOptions(rate=1.0), append=True)
    more.unlink()


SHARED: dict[
    str, Path
] = {}  # the session's trained run and its store (set by the fixture), the big CSV


def read_only(*names: str) -> Callable[[Path], None]:
    """Make files and folders (recursively) read-only; the fixture makes them writable again."""

    def apply(where: Path) -> None:
        for name in names:
            top = where / name
            for p in [top, *top.rglob("*")]:
                p.chmod(p.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))

    return apply


@dataclasses.dataclass(frozen=True)
class Fault:
    """Files to make, the command, and the error line after "chunkfit: error: " (None: it succeeds).

    ``keep`` names what must be unchanged byte for byte (default: the whole folder).
    """

    id: str
    files: dict[str, Callable[[Path], None]]
    args: list[str]
    line: str | re.Pattern[str] | None
    file_size: int | None = None
    then: Callable[[Path], None] | None = None
    keep: tuple[str, ...] | None = None


MISSING = (
    "s.zarr: chunk signal/c/5/0 (samples [320, 384)) is missing; the store is damaged: "
    "re-ingest the source"
)
UNREADABLE = re.compile(
    r"s\.zarr: chunk signal/c/5/0 \(samples \[320, 384\)\) cannot be read \(.+\); "
    r"the store is damaged: re-ingest the source"
)
TRUNCATED = re.compile(
    r"s\.h5: cannot open as an HDF5 file \(.*truncated file.*\); it may be truncated or not HDF5"
)
FULL = (
    "no space left or file size limit reached while writing (File too large); "
    "free space and run the command again"
)
LIMIT = 100_000  # bytes per file: the stores' small files fit, a chunk of the big CSV does not

FAULTS = [
    # -- a zarr chunk deleted, or overwritten with garbage: info reads attributes only -------------
    Fault("deleted-chunk-info", {"s.zarr": deleted_chunk}, ["info", "s.zarr"], None),
    Fault(
        "deleted-chunk-train",
        {"s.zarr": deleted_chunk},
        ["train", "s.zarr", *TRAIN],
        MISSING,
        keep=("s.zarr",),
    ),
    Fault(
        "deleted-chunk-evaluate",
        {"s.zarr": deleted_chunk, "run": run_folder},
        ["evaluate", "run", "s.zarr", "--plot", "eval.png"],
        MISSING,
    ),
    Fault(
        "deleted-chunk-predict",
        {"s.zarr": deleted_chunk, "run": run_folder},
        ["predict", "run", "s.zarr", "--out", "scores.zarr"],
        MISSING,
    ),
    Fault("corrupt-chunk-info", {"s.zarr": corrupt_chunk}, ["info", "s.zarr"], None),
    Fault(
        "corrupt-chunk-train",
        {"s.zarr": corrupt_chunk},
        ["train", "s.zarr", *TRAIN],
        UNREADABLE,
        keep=("s.zarr",),
    ),
    Fault(
        "corrupt-chunk-evaluate",
        {"s.zarr": corrupt_chunk, "run": run_folder},
        ["evaluate", "run", "s.zarr", "--plot", "eval.png"],
        UNREADABLE,
    ),
    Fault(
        "corrupt-chunk-predict",
        {"s.zarr": corrupt_chunk, "run": run_folder},
        ["predict", "run", "s.zarr", "--out", "scores.h5"],
        UNREADABLE,
    ),
    # -- HDF5: a truncated file, and garbage inside an intact one ----------------------------------
    Fault("truncated-hdf5-info", {"s.h5": truncated_hdf5}, ["info", "s.h5"], TRUNCATED),
    Fault("truncated-hdf5-train", {"s.h5": truncated_hdf5}, ["train", "s.h5", *TRAIN], TRUNCATED),
    Fault(
        "truncated-hdf5-evaluate",
        {"s.h5": truncated_hdf5, "run": run_folder},
        ["evaluate", "run", "s.h5", "--plot", "eval.png"],
        TRUNCATED,
    ),
    Fault(
        "truncated-hdf5-predict",
        {"s.h5": truncated_hdf5, "run": run_folder},
        ["predict", "run", "s.h5", "--out", "scores.zarr"],
        TRUNCATED,
    ),
    Fault(
        "corrupt-hdf5-chunk-predict",
        {"s.h5": corrupt_hdf5_chunk, "run": run_folder},
        ["predict", "run", "s.h5", "--out", "scores.zarr"],
        re.compile(
            r"s\.h5: signal samples \[320, 384\) cannot be read \(.+\); "
            r"the store is damaged: re-ingest the source"
        ),
    ),
    # -- the disk fills up during an ingest (a file size limit on the process) ---------------------
    Fault(
        "disk-full-new-zarr",
        {"big.csv": big_csv},
        ["ingest", "s.zarr", "big.csv", "--rate", "100"],
        f"s.zarr: {FULL} (no store was created)",
        file_size=LIMIT,
    ),
    Fault(
        "disk-full-new-hdf5",
        {"big.csv": big_csv},
        ["ingest", "s.h5", "big.csv", "--rate", "100"],
        f"s.h5: {FULL} (no store was created)",
        file_size=LIMIT,
    ),
    Fault(
        "disk-full-zarr-append",
        {"s.zarr": two_channel_store, "big.csv": big_csv},
        ["ingest", "--append", "s.zarr", "big.csv", "--rate", "100"],
        f"s.zarr: {FULL} (the store is unchanged)",
        file_size=LIMIT,
    ),
    Fault(
        "disk-full-zarr-append-journal",
        {"s.zarr": two_channel_store, "big.csv": big_csv},
        ["ingest", "--append", "s.zarr", "big.csv", "--rate", "100"],
        f"s.zarr: {FULL} (the store is unchanged)",
        file_size=30_000,
    ),
    Fault(
        "disk-full-hdf5-append",
        {"s.h5": two_channel_store, "big.csv": big_csv},
        ["ingest", "--append", "s.h5", "big.csv", "--rate", "100"],
        f"s.h5: {FULL} (the store is unchanged)",
        file_size=LIMIT,
    ),
    Fault(
        "disk-full-predict-hdf5",
        {"s.zarr": event_store, "run": run_folder},
        ["predict", "run", "s.zarr", "--out", "scores.h5"],
        "scores.h5: no space left or file size limit reached while writing the scores "
        "(File too large); free space and run the command again (nothing was written)",
        file_size=2_000,
    ),
    # -- read-only folders and stores --------------------------------------------------------------
    Fault(
        "read-only-folder-new-zarr",
        {"ro": lambda p: p.mkdir(), "ok.csv": small_csv},
        ["ingest", "ro/s.zarr", "ok.csv", "--rate", "1"],
        "ro/s.zarr: the store cannot be created in ro (Permission denied); "
        "choose a writable folder",
        then=read_only("ro"),
    ),
    Fault(
        "read-only-folder-new-hdf5",
        {"ro": lambda p: p.mkdir(), "ok.csv": small_csv},
        ["ingest", "ro/s.h5", "ok.csv", "--rate", "1"],
        "ro/s.h5: the store cannot be created in ro (Permission denied); choose a writable folder",
        then=read_only("ro"),
    ),
    Fault(
        "read-only-zarr-append",
        {"s.zarr": two_channel_store, "ok.csv": small_csv},
        ["ingest", "--append", "s.zarr", "ok.csv", "--rate", "100"],
        "s.zarr: the store cannot be written (Permission denied); make it writable to append "
        "to it (the store is unchanged)",
        then=read_only("s.zarr"),
    ),
    Fault(
        "read-only-hdf5-append",
        {"s.h5": two_channel_store, "ok.csv": small_csv},
        ["ingest", "--append", "s.h5", "ok.csv", "--rate", "100"],
        "s.h5: the store cannot be written (Permission denied); make it writable to append "
        "to it (the store is unchanged)",
        then=read_only("s.h5"),
    ),
    Fault(
        "read-only-folder-train",
        {"s.zarr": event_store, "ro": lambda p: p.mkdir()},
        ["train", "s.zarr", *TRAIN[:-1], "ro/run"],
        "ro/run: the run folder cannot be written (Permission denied); use another --out",
        then=read_only("ro"),
    ),
    Fault(
        "read-only-run-folder-evaluate",
        {"s.zarr": event_store, "run": run_folder},
        ["evaluate", "run", "s.zarr"],
        "run: the output folder is not writable; pass --plot with a path in another folder",
        then=read_only("run"),
    ),
    Fault(
        "read-only-output-folder-predict",
        {"s.zarr": event_store, "run": run_folder, "ro": lambda p: p.mkdir()},
        ["predict", "run", "s.zarr", "--out", "ro/scores.zarr"],
        "ro: the output folder is not writable; pass --out with a path in another folder",
        then=read_only("ro"),
    ),
    Fault(
        "read-only-store-info",
        {"s.zarr": event_store},
        ["info", "s.zarr", "--json"],
        None,
        then=read_only("s.zarr"),
    ),
    # -- a store whose length changed since the run was made ---------------------------------------
    Fault(
        "grown-store-evaluate",
        {"s.zarr": grown_store, "run": run_folder},
        ["evaluate", "run", "s.zarr", "--plot", "eval.png", "--json"],
        None,
        keep=("s.zarr", "run"),
    ),
    Fault(
        "grown-store-predict",
        {"s.zarr": grown_store, "run": run_folder},
        ["predict", "run", "s.zarr", "--out", "scores.zarr"],
        None,
        keep=("s.zarr", "run"),
    ),
]

Outcome = tuple[Fault, Path, dict[str, dict[str, bytes | None]], "Future[CompletedProcess[str]]"]


def _kept(where: Path, fault: Fault) -> dict[str, dict[str, bytes | None]]:
    names = fault.keep if fault.keep is not None else (".",)
    return {
        n: tree(where / n) if (where / n).is_dir() else {n: (where / n).read_bytes()} for n in names
    }


def _loads_tensorflow(fault: Fault) -> bool:
    return fault.args[0] in ("train", "evaluate", "predict")


def _writable_again(where: Path) -> None:
    for p in [where, *where.rglob("*")]:
        if not p.is_symlink():
            p.chmod(p.stat().st_mode | stat.S_IWUSR)


@pytest.fixture(scope="module")
def faults(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Outcome]]:
    """Every fault once, three at a time, each in its own folder."""
    runs = trained(tmp_path_factory.getbasetemp())
    SHARED.update(run=runs.run, store=runs.store)
    folders = []
    with ThreadPoolExecutor(max_workers=3) as pool:
        out: dict[str, Outcome] = {}
        for fault in sorted(FAULTS, key=_loads_tensorflow, reverse=True):  # the slow ones first
            where = tmp_path_factory.mktemp(fault.id)
            folders.append(where)
            for name, make in fault.files.items():
                make(where / name)
            if fault.then is not None:
                fault.then(where)
            before = _kept(where, fault)
            future = pool.submit(
                run_cli, *fault.args, cwd=where, file_size=fault.file_size, obey_modes=True
            )
            out[fault.id] = (fault, where, before, future)
        for _, _, _, future in out.values():
            future.result()
        yield out
    for where in folders:
        _writable_again(where)


REFUSED = [f.id for f in FAULTS if f.line is not None]
SUCCEEDS = [f.id for f in FAULTS if f.line is None]


@pytest.mark.parametrize("name", REFUSED)
def test_fault_is_reported_in_one_line_naming_what_and_where(
    faults: dict[str, Outcome], name: str
) -> None:
    fault, _, _, future = faults[name]
    line = error_line(future.result()).removeprefix("chunkfit: error: ")
    if isinstance(fault.line, re.Pattern):
        assert fault.line.fullmatch(line), line
    else:
        assert line == fault.line


@pytest.mark.parametrize("name", REFUSED)
def test_fault_loses_nothing_and_leaves_nothing_behind(
    faults: dict[str, Outcome], name: str
) -> None:
    fault, where, before, _ = faults[name]
    assert _kept(where, fault) == before


@pytest.mark.parametrize("name", SUCCEEDS)
def test_command_that_can_work_around_the_fault_succeeds_quietly(
    faults: dict[str, Outcome], name: str
) -> None:
    result = faults[name][3].result()
    assert (result.returncode, result.stderr) == (0, "")


@pytest.mark.parametrize("name", SUCCEEDS)
def test_command_that_succeeds_despite_the_fault_changes_no_input(
    faults: dict[str, Outcome], name: str
) -> None:
    fault, where, before, _ = faults[name]
    assert _kept(where, fault) == before


def test_info_on_a_store_with_a_deleted_chunk_still_describes_it(
    faults: dict[str, Outcome],
) -> None:
    assert "samples      1,200" in faults["deleted-chunk-info"][3].result().stdout


def test_grown_store_is_evaluated_over_its_current_length(faults: dict[str, Outcome]) -> None:
    _, where, _, future = faults["grown-store-evaluate"]
    with chunkfit.open_store(where / "s.zarr") as s:
        expected = sum(max(int(b - a) - WINDOW + 1, 0) for a, b in s.segments)
    assert json.loads(future.result().stdout)["windows"] == expected


def test_grown_store_gets_one_score_per_current_sample(faults: dict[str, Outcome]) -> None:
    import zarr

    _, where, _, _ = faults["grown-store-predict"]
    with chunkfit.open_store(where / "s.zarr") as s:
        n = s.n_samples
    assert zarr.open_array(str(where / "scores.zarr"), path="scores", mode="r").shape == (n,)


def test_grown_store_is_longer_than_the_one_the_run_was_made_on(faults: dict[str, Outcome]) -> None:
    _, where, _, _ = faults["grown-store-predict"]
    made_on = json.loads((where / "run" / "run.json").read_text())["store"]["identity"]["n_samples"]
    with chunkfit.open_store(where / "s.zarr") as s:
        assert s.n_samples == made_on + 500


def test_read_only_store_is_still_read(faults: dict[str, Outcome]) -> None:
    assert json.loads(faults["read-only-store-info"][3].result().stdout)["samples"] == 1200


@pytest.mark.parametrize("name", ["deleted-chunk-train", "corrupt-chunk-train"])
def test_train_on_a_damaged_store_leaves_no_run_folder(
    faults: dict[str, Outcome], name: str
) -> None:
    assert not (faults[name][1] / "run").exists()

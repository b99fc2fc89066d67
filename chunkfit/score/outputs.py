"""What ``chunkfit predict`` writes: the scores array (zarr or HDF5) and the detections CSV.

Each output is written under a temporary name and renamed into place when complete, and is held by
one process while it is written: a lock file beside it (``.NAME.chunkfit.lock``, an ``fcntl.flock``
that dies with its process) refuses a second writer of the same output.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from .._fs import FileLock, Locked, refuse_url
from ..core.detect import Detection
from ..core.timeline import Timeline
from ..errors import (
    BusyError,
    DiskFullError,
    ReadOnlyError,
    RunError,
    StoreExistsError,
    UsageError,
)
from ..store import Store
from ..store.hdf5backend import GuardedFile
from ..store.layout import suffix_backend
from ..store.zarrbackend import wait_for_zarr_writes
from ..train.runfolder import busy_message
from .runs import check_output_folder


class OutputLocks:
    """The locks of the outputs one predict writes, taken before anything is checked or written;
    ``claim`` once the checks have passed."""

    def __init__(self, *outputs: Path | None) -> None:
        self.locks: list[FileLock] = []
        paths = {
            str(p.resolve()): p for p in outputs if p is not None
        }  # one lock for a path named twice
        try:
            for path in paths.values():
                lock = FileLock(path.parent / f".{path.name}.chunkfit.lock")
                try:
                    lock.acquire()
                except Locked as held:
                    raise BusyError(busy_message(path, "output", held.pid)) from None
                except OSError:
                    # a folder that cannot be written is refused, with its reason, by the checks
                    continue
                self.locks.append(lock)
        except BaseException:
            self.release()
            raise

    def claim(self) -> None:
        for lock in self.locks:
            lock.claim()

    def release(self) -> None:
        for lock in self.locks:
            lock.release()
        self.locks = []


def write_failure(err: OSError, out: Path) -> Exception:
    """A failed write of the outputs as one line; nothing was written (the temporaries are gone)."""
    if err.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
        return DiskFullError(
            f"{out}: no space left or file size limit reached while writing the scores "
            f"({os.strerror(err.errno)}); "
            "free space and run the command again (nothing was written)"
        )
    if err.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return ReadOnlyError(
            f"{out.parent}: the output folder cannot be written ({os.strerror(err.errno)}); "
            "pass --out with a path in another folder"
        )
    return err


def _claim(path: Path, overwrite: bool, flag: str) -> None:
    if path.exists() and not overwrite:
        raise StoreExistsError(f"{path}: already exists; pass --overwrite to replace it")
    if path.exists() and path.is_dir() and not path.name.endswith(".zarr"):
        raise RunError(f"{path}: is a directory; choose a file name")
    check_output_folder(path, flag)


def check_outputs(
    out: Path | None,
    events_out: Path | None,
    store: str | os.PathLike[str] | Store,
    overwrite: bool,
) -> None:
    if out is not None:
        refuse_url(out, "--out")
    if events_out is not None:
        refuse_url(events_out, "--events-out")
    if out is not None and not str(out).rstrip("/").lower().endswith((".zarr", ".h5", ".hdf5")):
        raise UsageError(
            f"{out}: the scores path ends in .zarr (zarr directory) or .h5/.hdf5 (HDF5 file); "
            "rename it"
        )
    store_path = Path(store.path if isinstance(store, Store) else store).resolve()
    taken = [p for p in (out, events_out) if p is not None and p.resolve() == store_path]
    if taken:
        raise UsageError(f"{taken[0]}: is the store being scored; write the output elsewhere")
    if events_out is not None and out is not None and events_out.resolve() == out.resolve():
        raise UsageError(f"{events_out}: --events-out and --out name the same file; give two paths")
    if out is not None:
        _claim(out, overwrite, "--out")
    if events_out is not None:
        _claim(events_out, overwrite, "--events-out")


class ScoreWriter:
    """The scores array under its temporary name; ``growable`` (``predict --follow``) lets ``grow``
    lengthen it as the store grows, in chunks of a fixed size."""

    def __init__(self, path: Path, n: int, attrs: dict[str, Any], growable: bool = False) -> None:
        self.kind = suffix_backend(str(path))
        self.growable = growable
        self.tmp = path.parent / f".{path.name}.chunkfit-tmp-{os.getpid()}"
        self.file: Any = None
        self.guard: GuardedFile | None = None
        try:
            self._create(n, attrs)
        except BaseException:
            self.abort()
            raise

    def _create(self, n: int, attrs: dict[str, Any]) -> None:
        chunk = 1 << 18
        rows = chunk if self.growable else min(chunk, max(n, 1))
        if self.kind == "zarr":
            import zarr

            group = zarr.open_group(str(self.tmp), mode="w", zarr_format=3)
            group.attrs["chunkfit_scores"] = attrs
            self.arr: Any = group.create_array(
                "scores",
                shape=(n,),
                chunks=(rows,),
                dtype="float32",
                fill_value=float("nan"),
                dimension_names=["time"],
            )
        else:
            import json

            import h5py

            # Through a guard: libhdf5 cannot survive its own failed writes (see GuardedFile).
            self.guard = GuardedFile(self.tmp, "w+b")
            self.file = h5py.File(self.guard, "w")
            self.file.attrs["chunkfit_scores"] = json.dumps(attrs)
            self.arr = self.file.create_dataset(
                "scores",
                shape=(n,),
                dtype="float32",
                chunks=(rows,),
                fillvalue=np.nan,
                compression="lzf",
                maxshape=(None,) if self.growable else (n,),
            )

    def grow(self, n: int) -> None:
        """Lengthen the array to ``n`` samples (NaN until written)."""
        if n > int(self.arr.shape[0]):
            self.arr.resize((n,))

    def write(self, a: int, values: np.ndarray) -> None:
        self.arr[a : a + values.size] = values
        self._check()

    def _check(self) -> None:
        if self.guard is not None and self.guard.error is not None:
            raise self.guard.error

    def _close(self) -> None:
        file, self.file = self.file, None
        try:
            if file is not None:
                file.close()
        finally:
            if self.guard is not None:
                self.guard.close()

    def commit(self, path: Path) -> None:
        self._close()
        self._check()
        if path.exists():
            shutil.rmtree(path) if path.is_dir() else path.unlink()
        os.replace(self.tmp, path)

    def abort(self) -> None:
        if self.kind == "zarr":
            wait_for_zarr_writes()
        with contextlib.suppress(Exception):  # the half-written temporary is deleted anyway
            self._close()
        if self.tmp.exists():
            shutil.rmtree(self.tmp, ignore_errors=True) if self.tmp.is_dir() else self.tmp.unlink()


COLUMNS = [
    "start_s",
    "end_s",
    "peak_s",
    "peak_score",
    "segment",
    "start_sample",
    "end_sample",
    "peak_sample",
]
UTC_COLUMNS = ["start_utc", "end_utc", "peak_utc"]


class DetectionCsv:
    """Counts detections and, given a path, writes one CSV row per event (docs/guides/outputs).

    Seconds follow the store's ``Timeline`` (empty cells where the rate is unknown); the UTC
    columns are there when the store knows when some segment was recorded (empty cells for the
    segments it does not). ``end`` is one past the event's last sample.
    """

    def __init__(self, path: Path | None, timeline: Timeline | None, flush: bool = False) -> None:
        self.count = 0
        self.flush = flush  # each row reaches the file as it is written (``predict --follow``)
        self.timeline = timeline
        self.utc = timeline is not None and timeline.has_utc
        self.handle = path.open("w", newline="") if path is not None else None
        self.rows = csv.writer(self.handle) if self.handle is not None else None
        if self.rows is not None:
            self.rows.writerow(COLUMNS + (UTC_COLUMNS if self.utc else []))

    def write(self, detections: list[Detection]) -> None:
        self.count += len(detections)
        if self.rows is None:
            return
        for d in detections:
            self.rows.writerow(self._row(d))
            if self.flush and self.handle is not None:
                self.handle.flush()

    def _row(self, d: Detection) -> list[str | int]:
        t = self.timeline
        points = (d.start, d.end, d.peak)
        seconds = [t.seconds(p, d.segment) if t is not None else None for p in points]
        row: list[str | int] = [
            *("" if v is None else f"{v:.6f}" for v in seconds),
            f"{d.peak_score:.6f}",
            d.segment,
            *points,
        ]
        if self.utc and t is not None:
            row += [t.utc(p, d.segment) or "" for p in points]
        return row

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()


class LiveDetectionCsv:
    """The detections CSV of ``predict --follow``, made once the store's rate is known (its header
    has seconds then), else at its first row or at the end, as an offline ``predict`` of the final
    store writes it; its UTC columns are those of the store it is made from."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.csv: DetectionCsv | None = None
        self.count = 0
        self._timeline: tuple[Store, Timeline] | None = None

    def _timeline_of(self, store: Store) -> Timeline:
        """The store's timeline, computed again only when the store was opened again."""
        if self._timeline is None or self._timeline[0] is not store:
            self._timeline = (store, Timeline.of(store))
        return self._timeline[1]

    def write(self, detections: list[Detection], store: Store) -> None:
        if self.csv is None and (detections or store.sample_rate is not None or self.path is None):
            self.csv = DetectionCsv(self.path, self._timeline_of(store), flush=True)
        if self.csv is not None:
            if detections:
                self.csv.timeline = self._timeline_of(store)
            self.csv.write(detections)
            self.count = self.csv.count

    def close(self, store: Store) -> None:
        self.write([], store)
        if self.csv is None:
            self.csv = DetectionCsv(self.path, self._timeline_of(store), flush=True)
        self.csv.close()

"""Reading a store: sample ranges, events, labels and segments, never the whole signal at once."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from .._fs import dir_size, refuse_url
from ..errors import StoreBusyError, StoreFormatError, StoreNotFoundError, UsageError
from . import journal
from .backend import Backend
from .backends import open_backend
from .changes import disk_stamp, length_on_disk, moved, wait_for_commit
from .chunkfiles import ChunkFiles
from .layout import (
    committed_last_segment,
    committed_lengths,
    suffix_backend,
    validate,
    validate_events,
    validate_segments,
)
from .remote import ROOT, Remote, commit_stamp
from .s3errors import guarded, translate
from .segtimes import SegmentTime, iso_utc, segment_times
from .urls import is_remote

OPEN_TRIES = 20  # loads of a local zarr store that raced a commit, before giving up


class Store:
    """A chunkfit signal store opened for reading.

    ``read(a, b)`` returns samples [a, b) of every channel as float32 [b - a, channels] with one
    contiguous read. Events, labels and segments are available for any range as well.
    """

    def __init__(self, path: str | os.PathLike[str], *, contents: bool = True) -> None:
        """``contents=False`` (an object-storage store): only the root document is read and checked,
        not the segments and events, for a writer that reads the rows it extends itself."""
        refuse_url(path, "stores", s3=True)
        self._contents = contents or not is_remote(path)
        self.backend_kind = suffix_backend(str(path))
        self.remote: Remote | None = None
        self._root: bytes | None = None
        if is_remote(path):
            self._open_remote(str(path))
            return
        self.path: Any = Path(path)
        if not self.path.exists():
            raise StoreNotFoundError(
                f"{self.path}: store not found; create it with `chunkfit ingest {self.path} SOURCE`"
            )
        if self.backend_kind == "zarr":
            if not self.path.is_dir():
                raise StoreFormatError(f"{self.path}: a zarr store is a directory, this is a file")
        elif self.path.is_dir():
            raise StoreFormatError(f"{self.path}: an HDF5 store is a file, this is a directory")
        self._chunk_files = ChunkFiles(self.path, None)
        self._open_local()

    def _open_local(self) -> None:
        """Load the store as last committed. A zarr append commits by rewriting several files, so a
        load that overlapped a commit (or an append that began meanwhile) is read again, never
        reported as damage: what is read must match the commit marks taken before the read."""
        for _ in range(OPEN_TRIES):
            mark = wait_for_commit(self.path) if self.backend_kind == "zarr" else None
            self._stamp = self._disk_stamp()
            self._backend: Backend = open_backend(self.path, self.backend_kind)
            try:
                self._load()
            except StoreFormatError:
                self._backend.close()
                if mark is not None and moved(self.path, mark):
                    continue
                raise
            except BaseException:
                self._backend.close()
                raise
            if mark is None or not moved(self.path, mark):
                return
            self._backend.close()
        raise StoreBusyError(
            f"{self.path}: the store changed {OPEN_TRIES} times while it was being opened; "
            "a process is appending to it: run the command again"
        )

    def _open_remote(self, url: str) -> None:
        """Open a zarr store on object storage: only what its root ``zarr.json`` commits is read."""
        remote = self.remote = Remote(url)
        self.path = remote.url
        self._chunk_files = ChunkFiles(self.path, remote)
        if self.backend_kind != "zarr":
            raise UsageError(
                f"{url}: HDF5 stores are not supported on object storage; ingest into a .zarr "
                "store instead"
            )
        kept = "nothing was read"
        root = self._root = guarded(url, kept, lambda: remote.get(ROOT))
        if root is None:
            if guarded(url, kept, remote.keys):
                raise StoreNotFoundError(
                    f"{url}: store not found: it holds objects of an unfinished ingest, but no "
                    f"committed store; remove them with `chunkfit ingest --repair {url}`"
                )
            raise StoreNotFoundError(
                f"{url}: store not found; create it with `chunkfit ingest {url} SOURCE`"
            )
        # The arrays come from this one read of the root (its consolidated metadata), so what is
        # loaded and the stamp that ``changed`` compares with are the same commit.
        self._backend = guarded(
            url, kept, lambda: open_backend(Path("."), "zarr", remote=remote, root=root)
        )
        try:
            guarded(url, kept, self._load)
        except BaseException:
            self._backend.close()
            raise
        self._stamp = commit_stamp(root) or (-1,)

    def _load(self) -> None:
        b = self._backend
        where = str(self.path)
        attrs = b.attrs()
        shapes: dict[str, tuple[int, ...]] = {}
        dtypes: dict[str, str] = {}
        try:
            names = b.names()
        except StoreFormatError:
            raise
        except (KeyError, ValueError, OSError) as err:
            raise StoreFormatError(f"{where}: not a valid chunkfit store: {err}") from None
        for name in names:
            try:
                arr = b.array(name)
                shapes[name] = tuple(int(n) for n in arr.shape)
                dtypes[name] = str(np.dtype(arr.dtype))
            except (KeyError, ValueError, TypeError, OSError) as err:
                raise StoreFormatError(
                    f"{where}: not a valid chunkfit store: array '{name}' is unreadable ({err})"
                ) from None
        self.committed: dict[str, int] | None = committed_lengths(where, attrs, shapes)
        if self.committed is not None:
            shapes = {n: (self.committed.get(n, s[0]), *s[1:]) for n, s in shapes.items()}
        validate(where, attrs, shapes, dtypes)
        self.attrs: dict[str, Any] = attrs
        self.channels: list[str] = list(attrs["channels"])
        self.sample_rate: float | None = attrs.get("sample_rate")
        self.n_samples: int = shapes["signal"][0]
        self.n_channels: int = len(self.channels)
        self.has_labels: bool = "labels" in shapes
        self._signal = b.array("signal")
        if self.backend_kind == "zarr" and self.chunk_samples < 1:
            raise StoreFormatError(
                f"{where}: not a valid chunkfit store: signal chunks of {self.chunk_samples} "
                "samples"
            )
        self._labels = b.array("labels") if self.has_labels else None
        self._events_arr = b.array("events") if "events" in shapes else None
        self.has_events: bool = bool(attrs.get("has_events")) and self._events_arr is not None
        last = committed_last_segment(where, attrs) if self.committed is not None else None
        if not self._contents:
            return
        self.segments: np.ndarray = self._read_all("segments").astype(np.int64).reshape(-1, 2)
        if last is not None and self.segments.shape[0]:
            self.segments[-1] = (
                last  # the row as committed, whatever a commit under way wrote since
            )
        validate_segments(where, self.segments, self.n_samples)
        self._events: np.ndarray | None = None
        if self._events_arr is not None:
            self.events  # noqa: B018 - read and checked on open: far smaller than the signal

    def _read_all(self, name: str) -> np.ndarray:
        try:
            if self.committed is not None:
                return np.asarray(self._backend.array(name)[: self.committed[name]])
            return np.asarray(self._backend.array(name)[...])
        except (OSError, ValueError, KeyError, RuntimeError) as err:
            raise StoreFormatError(f"{self.path}: array '{name}' cannot be read: {err}") from None

    # -- ranges -------------------------------------------------------------------------------
    def _check_range(self, a: int, b: int) -> None:
        if not (0 <= a <= b <= self.n_samples):
            raise UsageError(f"range [{a}, {b}) is outside the signal [0, {self.n_samples})")

    def read(self, a: int, b: int) -> np.ndarray:
        """Samples [a, b) of all channels, float32 [b - a, channels]."""
        self._check_range(a, b)
        self._check_chunks("signal", a, b)
        try:
            out = np.asarray(self._signal[a:b], dtype=np.float32)
        except Exception as err:  # noqa: BLE001 - zarr/numcodecs/h5py raise many types for damaged chunks
            self._unreachable(err)
            raise self._damaged("signal", a, b, err) from None
        if out.shape != (b - a, self.n_channels):
            raise StoreFormatError(
                f"{self.path}: signal read [{a}, {b}) returned shape {out.shape}"
            )
        return out

    def _check_chunks(self, name: str, a: int, b: int) -> None:
        """Refuse a range whose zarr chunk files are gone (zarr would return zeros for them)."""
        if self.backend_kind == "zarr" and b > a:
            arr: Any = self._labels if name == "labels" else self._signal
            self._chunk_files.check(arr, name, a, b, self.n_samples)

    def check_chunks(self) -> None:
        """Refuse a zarr store with any signal or label chunk file missing (a listing, no reads)."""
        self._check_chunks("signal", 0, self.n_samples)
        if self._labels is not None:
            self._check_chunks("labels", 0, self.n_samples)

    def read_labels(self, a: int, b: int) -> np.ndarray:
        """Per-sample labels [a, b); raises if the store has none."""
        self._check_range(a, b)
        if self._labels is None:
            raise UsageError(f"{self.path}: store has no per-sample labels")
        self._check_chunks("labels", a, b)
        try:
            return np.asarray(self._labels[a:b], dtype=np.int64)
        except Exception as err:  # noqa: BLE001 - as for the signal
            self._unreachable(err)
            raise self._damaged("labels", a, b, err) from None

    def _unreachable(self, err: Exception) -> None:
        """Raise an object store's failure (endpoint gone, access denied) as itself, not as
        damage."""
        if self.remote is not None:
            out = translate(self.remote.url, err, "the store is unchanged")
            if out is not err:
                raise out from None

    def _damaged(self, name: str, a: int, b: int, err: Exception) -> StoreFormatError:
        """Name the first chunk of [a, b) that cannot be decoded (read one by one, only on
        failure)."""
        arr: Any = self._labels if name == "labels" else self._signal
        zarr = self.backend_kind == "zarr"
        return self._chunk_files.damaged(arr, name, a, b, err, self.n_samples, zarr)

    @property
    def events(self) -> np.ndarray:
        """All event sample indices, sorted int64 (loaded once; far smaller than the signal)."""
        if self._events is None:
            if self._events_arr is None:
                self._events = np.zeros(0, dtype=np.int64)
            else:
                ev = self._read_all("events").astype(np.int64)
                validate_events(str(self.path), ev, self.n_samples)
                self._events = ev
        return self._events

    def events_in(self, a: int, b: int) -> np.ndarray:
        """Event sample indices falling in [a, b)."""
        ev = self.events
        return ev[np.searchsorted(ev, a, "left") : np.searchsorted(ev, b, "left")]

    def segments_in(self, a: int, b: int) -> np.ndarray:
        """Segments intersecting [a, b), clipped to it."""
        seg = self.segments
        keep = (seg[:, 1] > a) & (seg[:, 0] < b)
        out = seg[keep].copy()
        if out.size:
            out[:, 0] = np.maximum(out[:, 0], a)
            out[:, 1] = np.minimum(out[:, 1], b)
        return out

    @property
    def segment_times(self) -> list[SegmentTime | None]:
        """When each segment's first sample was taken, where the store knows it
        (chunkfit.store.segtimes)."""
        return segment_times(self.attrs, self.segments)

    @property
    def root_document(self) -> bytes | None:
        """On object storage, the root ``zarr.json`` (the commit) this store was opened at; else
        None."""
        return self._root

    # -- modification -------------------------------------------------------------------------
    def _disk_stamp(self) -> tuple[int, ...]:
        return disk_stamp(self.path, self.backend_kind, self.remote)

    def changed(self) -> str | None:
        """How the store changed on disk since it was opened ("its signal had 4,000 samples and now
        has 4,500"), or None: a few ``stat`` calls, no data read."""
        if self.remote is None and self.backend_kind == "zarr" and journal.pending(self.path):
            return "an append to it is in progress"
        if self._disk_stamp() == self._stamp:
            return None
        now = length_on_disk(self.path, self.backend_kind, self.remote)
        if now is not None and now != self.n_samples:
            return f"its signal had {self.n_samples:,} samples and now has {now:,}"
        return "its files changed on disk"

    # -- summary ------------------------------------------------------------------------------
    @property
    def label_classes(self) -> list[int]:
        return [int(c) for c in self.attrs.get("label_classes", [])]

    @property
    def chunk_samples(self) -> int:
        chunks = getattr(self._signal, "chunks", None)
        return int(chunks[0]) if chunks else 0

    @property
    def units(self) -> dict[str, str]:
        """Each channel's physical unit, where every source of the store named the same one (EDF
        and WFDB recordings do, in their source records); channels without one are left out."""
        named = [s.get("units") or {} for s in self.attrs.get("sources", [])]
        out: dict[str, str] = {}
        for channel in self.channels:
            found = {u.get(channel) for u in named}
            unit = found.pop() if len(found) == 1 else None
            if named and unit:
                out[channel] = str(unit)
        return out

    @property
    def identity(self) -> dict[str, Any]:
        """What makes this store this store: used to refuse resuming a run on another one."""
        return {
            "n_samples": self.n_samples,
            "channels": self.channels,
            "sample_rate": self.sample_rate,
            "sources": [s.get("sha256") for s in self.attrs.get("sources", [])],
        }

    def info(self) -> dict[str, Any]:
        size = self.remote.size() if self.remote is not None else dir_size(self.path)
        raw = self.n_samples * self.n_channels * 4
        rate = self.sample_rate
        out: dict[str, Any] = {
            "path": str(self.path),
            "backend": self.backend_kind,
            "samples": self.n_samples,
            "channels": self.channels,
            "sample_rate": rate,
            "duration_s": (self.n_samples / rate) if rate else None,
            "segments": int(self.segments.shape[0]),
            "segment_ranges": self.segments.tolist() if self.segments.shape[0] <= 20 else None,
            "segment_starts": _starts_text(self.segment_times[:20]),
            "events": int(self.events.size) if self.has_events else None,
            "label_counts": self.attrs.get("label_counts") if self.has_labels else None,
            "chunk_samples": self.chunk_samples,
            "codec": self._backend.codec_name(),
            "bytes_on_disk": size,
            "bytes_uncompressed": raw,
            "compression_ratio": (raw / size) if size else math.nan,
            "stats": self.attrs.get("stats", {}),
            "sources": self.attrs.get("sources", []),
        }
        return out

    def close(self) -> None:
        self._backend.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({str(self.path)!r}, samples={self.n_samples}, channels={self.channels})"


def _starts_text(times: list[SegmentTime | None]) -> list[str | None]:
    """Each segment's start as ``info`` shows it: ISO 8601 UTC, or None where the store does not
    know it (a time on a source's own clock says no date: it stays in the attributes)."""
    return [iso_utc(t.utc_us) if t is not None and t.utc_us is not None else None for t in times]


def open_store(path: str | os.PathLike[str]) -> Store:
    """Open a zarr (``.zarr``, default) or HDF5 (``.h5``/``.hdf5``) chunkfit store for reading."""
    return Store(path)

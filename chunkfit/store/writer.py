"""Writing a store as one transaction: a new store appears whole or not at all; an append commits
whole or not at all, including under ``kill -9``.

The writer buffers and writes the rows; how the transaction is made all or nothing is its commit
strategy's (``transaction.CommitStrategy``), chosen once by ``commit_strategy``: a local zarr
append is protected by the rollback journal (``JournalCommit``); a new local store, and an HDF5
append, are built as a temporary renamed into place (``ReplaceCommit``); a store on object storage
is written under its lease and committed by its root document (``LeaseCommit``).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import StoreFormatError
from . import segtimes
from .backend import Backend
from .journalcommit import JournalCommit
from .layout import (
    FORMAT_VERSION,
    empty_stats,
    json_safe_stats,
    merge_stats,
    restore_stats,
    suffix_backend,
)
from .leasecommit import LeaseCommit
from .replacecommit import ReplaceCommit
from .transaction import CommitStrategy, Finished
from .urls import is_remote
from .writerthread import WriterThread


def commit_strategy(path: str | os.PathLike[str], kind: str, append: bool) -> CommitStrategy:
    """The strategy that makes a transaction on the store at ``path`` all or nothing."""
    if is_remote(path):
        return LeaseCommit(str(path), kind, append)
    if append and kind == "zarr":
        return JournalCommit(Path(path))
    return ReplaceCommit(Path(path), kind, append)


class StoreWriter:
    """Adds samples, labels, events, segments and source records to a store in one transaction."""

    backend: Backend

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        channels: list[str],
        sample_rate: float | None,
        has_labels: bool,
        append: bool,
        chunk_samples: int = 65_536,
        codec: str = "lz4",
    ) -> None:
        self.kind = suffix_backend(str(path))
        self.append = append
        self.strategy = commit_strategy(path, self.kind, append)
        self.path: Any = self.strategy.path
        self.channels = list(channels)
        self._committed = False
        self._pending: list[np.ndarray] = []
        self._pending_labels: list[np.ndarray] = []
        self._pending_rows = 0
        self._events: list[np.ndarray] = []
        self._segments: list[tuple[int, int]] = []
        self._extend: tuple[int, int] | None = None
        self._sources: list[dict[str, Any]] = []
        self._times: dict[int, dict[str, Any]] = {}
        self._label_counts: dict[int, int] = {}
        self._jobs = WriterThread()
        self._queued = 0
        try:
            opened = self.strategy.begin()
            if opened is None:
                self._new_attrs(sample_rate)
            else:
                self.backend, self.attrs = opened.backend, opened.attrs
                self.stats = restore_stats(self.attrs.get("stats", {})) or empty_stats(
                    self.channels
                )
                for k, v in (self.attrs.get("label_counts") or {}).items():
                    self._label_counts[int(k)] = int(v)
        except BaseException as err:
            self._discard()
            out = self.strategy.explain(err)
            if out is err:
                raise
            raise out from None
        if append:
            self.length = int(self.backend.array("signal").shape[0])
            self._labelled = "labels" in self.backend.names()
            self.chunk = int(self.backend.array("signal").chunks[0])
        else:
            # The new store is created by the writer thread, so that importing numcodecs or
            # h5py overlaps the caller's parsing of the first block; a failure there is raised by
            # the next ``write`` or by ``commit``.
            self.length, self._labelled, self.chunk = 0, has_labels, chunk_samples
            self._jobs.submit(lambda: self._create_new(has_labels, chunk_samples, codec))
        self.start = self.length

    # -- transaction ------------------------------------------------------------------------------
    def _new_attrs(self, rate: float | None) -> None:
        self.attrs = {
            "format_version": FORMAT_VERSION,
            "sample_rate": rate,
            "channels": self.channels,
            "stats": {},
            "sources": [],
            "has_events": False,
        }
        self.stats = empty_stats(self.channels)

    def _create_new(self, has_labels: bool, chunk: int, codec: str) -> None:
        try:
            self.backend = self.strategy.create()
            c = len(self.channels)
            self.backend.create("signal", (0, c), "float32", (chunk, c), codec)
            if has_labels:
                self.backend.create("labels", (0,), "int32", (chunk,), codec)
            self.backend.create("events", (0,), "int64", (65_536,), codec)
            self.backend.create("segments", (0, 2), "int64", (4096, 2), "none")
        except OSError as err:
            raise self.strategy.explain(err) from None

    def commit(self) -> None:
        """Write what is buffered and make the whole transaction visible at once."""
        try:
            self.strategy.commit(self._finish)
        except BaseException as err:
            self.abort()
            out = self.strategy.explain(err)
            if out is err:
                raise
            raise out from None
        self._committed = True

    def _finish(self) -> Finished:
        """Write every buffered row and the small arrays; bring the attributes up to date for the
        commit."""
        self._drain()
        self._flush(final=True)
        self._write_small()
        self.attrs["stats"] = json_safe_stats(self.stats)
        self.attrs["sources"] = list(self.attrs.get("sources", [])) + self._sources
        if self._times:
            self.attrs[segtimes.KEY] = list(self.attrs.get(segtimes.KEY) or []) + [
                self._times[k] for k in sorted(self._times)
            ]
        if self._labelled:
            self.attrs["label_counts"] = {str(k): v for k, v in sorted(self._label_counts.items())}
            self.attrs["label_classes"] = sorted(self._label_counts)
        last = self._segments[-1] if self._segments else self._extend
        return Finished(self.backend, self.attrs, last)

    def _check_backend(self) -> None:
        """Raise a write the backend held back (HDF5 never sees its own failed writes)."""
        held = self.backend.write_error()
        if held is not None:
            raise self.strategy.explain(held)

    def _discard(self) -> None:
        """Undo a transaction that failed to begin: nothing of it may remain."""
        backend = getattr(self, "backend", None)
        if backend is not None:
            # A half-opened store fails to close in many ways; it is dropped.
            with contextlib.suppress(Exception):
                backend.close()
        self.strategy.discard()

    def abort(self) -> None:
        """Drop everything this transaction wrote; the store is as it was."""
        if self._committed:
            return
        self._jobs.stop()
        backend = getattr(self, "backend", None)
        if backend is not None:
            backend.wait_for_writes()
            with contextlib.suppress(Exception):
                backend.close()
        self.strategy.abort()

    def __enter__(self) -> StoreWriter:
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is not None or not self._committed:
            self.abort()

    # -- data -------------------------------------------------------------------------------------
    @property
    def has_labels(self) -> bool:
        return self._labelled

    @property
    def total(self) -> int:
        """Samples in the store once everything queued is written."""
        return self.start + self._queued

    def write(self, signal: np.ndarray, labels: np.ndarray | None = None) -> None:
        """Append rows [n, channels] (and their per-sample labels when the store has labels).

        Statistics and compression run in a background thread so the caller can parse the next
        block meanwhile; an error there is raised by a later ``write`` or by ``commit``.
        """
        if signal.ndim != 2 or signal.shape[1] != len(self.channels):
            raise ValueError(
                f"signal block of shape {signal.shape} for {len(self.channels)} channels"
            )
        n = signal.shape[0]
        if n == 0:
            return
        if (labels is not None) != self._labelled:
            raise ValueError("labels must be given exactly when the store has labels")
        self._raise_worker_error()
        self._queued += n
        self._jobs.submit(lambda: self._write_now(signal, labels))

    def _raise_worker_error(self) -> None:
        """Raise the failure of a job of the writer thread, or of a begin that runs behind."""
        err = self._jobs.take_error()
        if err is None:
            err = self.strategy.begin_failure()  # the lease, or the check that no store is there
        if err is not None:
            raise self.strategy.explain(err)

    def _drain(self) -> None:
        self._jobs.stop()
        self._raise_worker_error()

    def _write_now(self, signal: np.ndarray, labels: np.ndarray | None) -> None:
        n = signal.shape[0]
        block = np.ascontiguousarray(signal, dtype=np.float32)
        merge_stats(self.stats, self.channels, block)
        self._pending.append(block)
        if labels is not None:
            lab = np.asarray(labels, dtype=np.int32)
            vals, counts = np.unique(lab, return_counts=True)
            for v, c in zip(vals.tolist(), counts.tolist(), strict=True):
                self._label_counts[v] = self._label_counts.get(v, 0) + c
            self._pending_labels.append(lab)
        self._pending_rows += n
        if self._pending_rows >= 8 * self.chunk:
            self._flush(final=False)

    def _flush(self, final: bool) -> None:
        if not self._pending_rows:
            return
        end = self.length + self._pending_rows
        if not final:
            end = (end // self.chunk) * self.chunk
        take = end - self.length
        if take <= 0:
            return
        sig = np.concatenate(self._pending) if len(self._pending) > 1 else self._pending[0]
        lab = None
        if self._pending_labels:
            lab = (
                np.concatenate(self._pending_labels)
                if len(self._pending_labels) > 1
                else self._pending_labels[0]
            )
        try:
            self.backend.write_rows("signal", self.length, sig[:take])
            if lab is not None:
                self.backend.write_rows("labels", self.length, lab[:take])
        except OSError as err:
            raise self.strategy.explain(err) from None
        self._check_backend()
        rest = sig[take:]
        self._pending = [rest] if rest.shape[0] else []
        self._pending_labels = [lab[take:]] if lab is not None and lab.shape[0] > take else []
        self._pending_rows = rest.shape[0]
        self.length = end

    def add_segment(self, start: int, stop: int) -> None:
        """Record samples [start, stop) (absolute indices) as one contiguous recording."""
        if stop > start:
            self._segments.append((int(start), int(stop)))

    def extend_last_segment(self, start: int, stop: int) -> None:
        """The store's last segment, which starts at ``start``, now ends at ``stop``: a live
        stream's recording continues across its commits as one segment."""
        self._extend = (int(start), int(stop))

    def add_events(self, indices: np.ndarray) -> None:
        """Absolute, sorted event sample indices (must lie in this transaction's samples)."""
        if indices.size:
            self._events.append(np.asarray(indices, dtype=np.int64))
        self.attrs["has_events"] = True

    def add_segment_time(self, record: dict[str, Any]) -> None:
        """Record when the segment starting at ``record["sample"]`` was recorded
        (chunkfit.store.segtimes); a later record for the same sample replaces an earlier one."""
        self._times[int(record["sample"])] = record

    def add_source(self, record: dict[str, Any]) -> None:
        """Record where this transaction's samples came from (the store's ``sources``)."""
        self._sources.append(record)

    def _write_small(self) -> None:
        """Write the segments and events of this transaction."""
        backend = self.backend
        if self._extend is not None:
            n = backend.length("segments")
            tail = backend.rows("segments", n - 1, n).reshape(-1, 2) if n else np.zeros((0, 2))
            if not tail.size or int(tail[0, 0]) != self._extend[0]:
                raise StoreFormatError(
                    f"{self.path}: the last segment does not start at {self._extend[0]}; cannot "
                    "extend it"
                )
            backend.write_rows("segments", n - 1, np.asarray([self._extend], dtype=np.int64))
        if self._segments:
            seg = np.asarray(self._segments, dtype=np.int64)
            backend.write_rows("segments", backend.length("segments"), seg)
        if self._events:
            ev = np.unique(np.concatenate(self._events))
            n0 = backend.length("events")
            if n0:
                last = int(backend.rows("events", n0 - 1, n0)[0])
                if ev.size and ev[0] <= last:
                    raise StoreFormatError(
                        f"{self.path}: new events must come after the stored ones"
                    )
            if ev.size:
                backend.write_rows("events", n0, ev)

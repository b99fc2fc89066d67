"""Writing a store as one transaction: a new store appears whole or not at all; an append commits
whole or not at all, including under ``kill -9``.

New stores are built under a hidden temporary name beside the target and renamed into place.
Zarr appends are protected by the rollback journal; HDF5 appends work on a copy that replaces the
original on commit (HDF5 files cannot be rolled back in place).

Test hook: ``CHUNKFIT_TEST_COMMIT_PAUSE=FLAG:SECONDS`` makes a commit, once everything but the
commit itself is written, create the local file FLAG and wait until it is deleted or SECONDS have
passed: tests kill the process at the last moment before a commit that way, not at a guessed one.
"""

from __future__ import annotations

import contextlib
import errno
import os
import queue
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .._fs import pause_on_flag, pid_alive
from ..errors import (
    ChunkfitError,
    DiskFullError,
    ReadOnlyError,
    StoreExistsError,
    StoreFormatError,
    UsageError,
)
from . import journal
from .backends import Backend, ZarrBackend, open_backend
from .layout import (
    FORMAT_VERSION,
    committed_last_segment,
    empty_stats,
    json_safe_stats,
    merge_stats,
    restore_stats,
    suffix_backend,
)
from .remote import LEASE, ROOT, Lease, Remote, guarded, is_remote, translate

TMP_MARK = ".chunkfit-tmp-"
COMMIT_PAUSE_HOOK = "CHUNKFIT_TEST_COMMIT_PAUSE"


def _test_pause_before_commit() -> None:
    hook = os.environ.get(COMMIT_PAUSE_HOOK)
    if hook:
        flag, _, seconds = hook.rpartition(":")
        pause_on_flag(Path(flag), float(seconds))


def clean_stale_temporaries(target: Path) -> None:
    """Remove temporaries left by killed writers of ``target`` (their pid is gone)."""
    prefix = f".{target.name}{TMP_MARK}"
    for p in target.parent.glob(prefix + "*"):
        pid = p.name[len(prefix) :]
        if pid.isdigit() and not pid_alive(int(pid)):
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)


def _write_error(err: OSError, path: Path | str, append: bool) -> Exception:
    """A failed write as the user's problem to act on (full disk, read-only place), or as it was."""
    if isinstance(err, ChunkfitError) or isinstance(path, str):
        return err  # an s3:// store's failures are translated by ``remote.guarded``
    outcome = "the store is unchanged" if append else "no store was created"
    if err.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
        return DiskFullError(
            f"{path}: no space left or file size limit reached while writing ({os.strerror(err.errno)}); "
            f"free space and run the command again ({outcome})"
        )
    if err.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        if append:
            return ReadOnlyError(
                f"{path}: the store cannot be written ({os.strerror(err.errno)}); make it writable to append "
                f"to it ({outcome})"
            )
        return ReadOnlyError(
            f"{path}: the store cannot be created in {path.parent} ({os.strerror(err.errno)}); "
            "choose a writable folder"
        )
    return err


class StoreWriter:
    """Adds samples, labels, events, segments and source records to a store in one transaction."""

    b: Backend

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
        self.remote: Remote | None = Remote(str(path)) if is_remote(path) else None
        self.path: Any = self.remote.url if self.remote is not None else Path(path)
        self.kind = suffix_backend(str(path))
        self.append = append
        self._lease: Lease | None = None
        self.channels = list(channels)
        self._committed = False
        self._closed = False
        self._pending: list[np.ndarray] = []
        self._pending_labels: list[np.ndarray] = []
        self._pending_rows = 0
        self._events: list[np.ndarray] = []
        self._segments: list[tuple[int, int]] = []
        self._extend: tuple[int, int] | None = None
        self._sources: list[dict[str, Any]] = []
        self._label_counts: dict[int, int] = {}
        self._tmp: Path | None = None
        self._made_dirs: list[Path] = []
        self._worker: threading.Thread | None = None
        self._worker_error: BaseException | None = None
        self._failed = False
        self._queued = 0
        self._journal_begun = False
        self._begun = (
            False  # on object storage: this writer holds the lease and may delete what it wrote
        )
        try:
            if self.remote is not None and not append:
                self._refuse_hdf5_remote()
                self._new_attrs(sample_rate)
            elif self.remote is not None:
                guarded(
                    self.remote.url,
                    "nothing was written",
                    lambda: self._begin_remote(append, sample_rate),
                )
            elif append:
                self._begin_append()
            else:
                self._prepare_new(sample_rate)
        except BaseException as err:
            self._discard()
            if isinstance(err, OSError) and not isinstance(err, ChunkfitError):
                raise _write_error(err, self.path, append) from None
            raise
        if append:
            self.length = int(self.b.array("signal").shape[0])
            self._labelled = "labels" in self.b.names()
            self.chunk = int(self.b.array("signal").chunks[0])
        else:
            # The new store is created by the writer thread, so that importing numcodecs or
            # h5py (0.05-0.1 s) overlaps the caller's parsing of the first block; a failure
            # there is raised by the next ``write`` or by ``commit``. On object storage the lease,
            # the check that no store is there and the removal of a killed ingest's objects run in a
            # thread of their own while the caller parses and the writer thread encodes; chunk
            # uploads wait for them.
            self.length, self._labelled, self.chunk = 0, has_labels, chunk_samples
            if self.remote is not None:
                self._begin_behind(lambda: self._begin_remote(False, sample_rate))
            self._submit(lambda: self._create_new(has_labels, chunk_samples, codec))
        self.start = self.length

    # -- transaction ------------------------------------------------------------------------------
    def _prepare_new(self, rate: float | None) -> None:
        """Check the target path and name the temporary; the store itself is made by ``_create_new``."""
        if self.path.exists():
            raise StoreExistsError(
                f"{self.path}: already exists; use --append to add to it or pick a new name"
            )
        for folder in self.path.parents:
            if folder.exists() or folder.is_symlink():
                if not folder.is_dir():
                    raise UsageError(
                        f"{self.path}: {folder} is a file, not a folder; choose another path"
                    )
                break
        parent = self.path.parent.absolute()
        while not parent.exists():
            self._made_dirs.append(parent)  # removed again if the transaction fails
            parent = parent.parent
        self.path.parent.mkdir(parents=True, exist_ok=True)
        clean_stale_temporaries(self.path)
        self._tmp = self.path.parent / f".{self.path.name}{TMP_MARK}{os.getpid()}"
        if self._tmp.exists():
            shutil.rmtree(self._tmp) if self._tmp.is_dir() else self._tmp.unlink()
        self._new_attrs(rate)

    def _new_attrs(self, rate: float | None) -> None:
        self.attrs: dict[str, Any] = {
            "format_version": FORMAT_VERSION,
            "sample_rate": rate,
            "channels": self.channels,
            "stats": {},
            "sources": [],
            "has_events": False,
        }
        self.stats = empty_stats(self.channels)

    def _begin_behind(self, job: Callable[[], None]) -> None:
        """Run ``job`` in a thread of its own; the remote's uploads, the commit and an abort wait for it."""
        from concurrent.futures import Future

        assert self.remote is not None
        done: Future[None] = Future()

        def run() -> None:
            try:
                job()
            except BaseException as err:  # raised by the next write, the commit or the uploads
                done.set_exception(err)
            else:
                done.set_result(None)

        self.remote.gate = done
        threading.Thread(target=run, name="chunkfit-begin", daemon=True).start()

    def _wait_begun(self) -> None:
        """Wait for ``_begin_behind``'s job; raise its failure."""
        if self.remote is not None and self.remote.gate is not None:
            self.remote.gate.result()

    def _refuse_hdf5_remote(self) -> None:
        if self.kind != "zarr":
            raise UsageError(
                f"{self.path}: HDF5 stores are not supported on object storage; ingest into a .zarr store instead"
            )

    def _begin_remote(self, append: bool, rate: float | None) -> None:
        """Take the store's lease; a new store's leftovers (a killed ingest's objects) are removed, an
        existing store's arrays are cut back to their committed lengths (an append cut short)."""
        assert self.remote is not None
        self._refuse_hdf5_remote()
        exists = f"{self.path}: already exists; use --append to add to it or pick a new name"
        if not append and self.remote.get(ROOT) is not None:
            raise StoreExistsError(exists)  # before the lease, so the message is not "busy"
        self._lease = Lease(self.remote)
        self._lease.acquire()
        if not append:
            if self.remote.get(ROOT) is not None:  # committed meanwhile by the lease's last holder
                raise StoreExistsError(exists)
            self._begun = True
            self.remote.clear(keep=LEASE)
            return
        from .reader import Store

        # The root only (its segments and events are not read): the rows this append extends are
        # fetched by ``open_for_append``, with the arrays' own documents, in one round trip.
        with Store(self.path, contents=False) as existing:
            self.attrs = dict(existing.attrs)
            committed = dict(existing.committed or {})
        self._begun = True
        backend = open_backend(
            Path("."), "zarr", writable=True, remote=self.remote, root=existing.root_document
        )
        assert isinstance(backend, ZarrBackend)
        self.b = backend
        backend.open_for_append()
        for name in self.b.names():
            arr = self.b.array(name)
            if name in committed and arr.shape[0] != committed[name]:
                arr.resize((committed[name], *arr.shape[1:]))
        n, last = committed.get("segments", 0), committed_last_segment(str(self.path), self.attrs)
        if n and last is not None and backend.rows("segments", n - 1, n).tolist() != [list(last)]:
            # A commit cut short rewrote the last segment's row, and the root kept the row as committed.
            backend.write_rows("segments", n - 1, np.asarray([last], dtype=np.int64))
        self.stats = restore_stats(self.attrs.get("stats", {})) or empty_stats(self.channels)
        for k, v in (self.attrs.get("label_counts") or {}).items():
            self._label_counts[int(k)] = int(v)

    def _create_new(self, has_labels: bool, chunk: int, codec: str) -> None:
        assert self._tmp is not None or self.remote is not None
        try:
            self.b = open_backend(
                self._tmp or Path("."), self.kind, writable=True, create=True, remote=self.remote
            )
            c = len(self.channels)
            self.b.create("signal", (0, c), "float32", (chunk, c), codec)
            if has_labels:
                self.b.create("labels", (0,), "int32", (chunk,), codec)
            self.b.create("events", (0,), "int64", (65_536,), codec)
            self.b.create("segments", (0, 2), "int64", (4096, 2), "none")
        except OSError as err:
            raise _write_error(err, self.path, self.append) from None

    def _begin_append(self) -> None:
        from .reader import Store

        with Store(self.path) as existing:  # validates, and rolls back an interrupted append
            self.attrs = dict(existing.attrs)
        if self.kind == "zarr":
            journal.begin(self.path)
            self._journal_begun = True
            self.b = open_backend(self.path, "zarr", writable=True)
        else:
            clean_stale_temporaries(self.path)
            self._tmp = self.path.parent / f".{self.path.name}{TMP_MARK}{os.getpid()}"
            shutil.copy2(self.path, self._tmp)
            self.b = open_backend(self._tmp, "hdf5", writable=True)
        self.stats = restore_stats(self.attrs.get("stats", {})) or empty_stats(self.channels)
        for k, v in (self.attrs.get("label_counts") or {}).items():
            self._label_counts[int(k)] = int(v)

    def commit(self) -> None:
        """Write what is buffered and make the whole transaction visible at once."""
        if self.remote is not None:
            kept = "the store is unchanged" if self.append else "no store was created"
            try:
                guarded(self.remote.url, kept, self._commit_remote)
            except BaseException:
                self.abort()
                raise
            self._committed = True
            return
        try:
            self._finish_arrays()
            self.b.set_attrs(self.attrs)
            self.b.close()
            self._closed = True
            self._check_backend()
            _test_pause_before_commit()
            if self.kind == "zarr" and self.append:
                journal.commit(self.path)
            else:
                assert self._tmp is not None
                if not self.append and self.path.exists():
                    raise StoreExistsError(
                        f"{self.path}: appeared while ingesting; nothing was written"
                    )
                os.replace(self._tmp, self.path)
        except OSError as err:
            self.abort()
            raise _write_error(err, self.path, self.append) from None
        self._committed = True

    def _finish_arrays(self) -> None:
        """Write every buffered row and the small arrays; bring the attributes up to date for the commit."""
        self._drain()
        self._flush(final=True)
        self._write_small()
        self.attrs["stats"] = json_safe_stats(self.stats)
        self.attrs["sources"] = list(self.attrs.get("sources", [])) + self._sources
        if self._labelled:
            self.attrs["label_counts"] = {str(k): v for k, v in sorted(self._label_counts.items())}
            self.attrs["label_classes"] = sorted(self._label_counts)

    def _commit_remote(self) -> None:
        """As ``commit``, in three round trips one after another: the last chunks and the array
        documents, sent beside the lease's renewal (which checks this is still the one writer); then the
        root ``zarr.json`` that commits them (every array's committed length, and every array's document
        at that length as consolidated metadata, which zarr and xarray read); then the lease's deletion."""
        assert self.remote is not None
        self._wait_begun()
        self.remote.bounded = False  # the last chunks of every array and the documents go together
        self._finish_arrays()
        last = self._segments[-1] if self._segments else self._extend
        if last is None:
            last = committed_last_segment(str(self.path), self.attrs)
        self.attrs["committed"] = {n: self.b.length(n) for n in self.b.names()}
        if last is not None:  # see ``committed_last_segment``
            self.attrs["committed"]["last_segment"] = list(last)
        documents, root = self.b.commit_documents(self.attrs)
        self.remote.put_behind(documents)
        if self._lease is not None:
            self._lease.confirm()  # no other process took the lease over
        self.remote.settle()  # every chunk and document is stored before the root commits them
        _test_pause_before_commit()
        self.remote.put(ROOT, root)
        self._closed = True
        if self._lease is not None:
            self._lease.release()
            self._lease = None

    def _abort_remote(self) -> None:
        """A new store's objects are removed; an append's arrays are cut back to the committed lengths.
        Best effort: whatever stays is past what the root ``zarr.json`` commits, so no reader sees it."""
        assert self.remote is not None
        remote = self.remote
        with contextlib.suppress(BaseException):  # its failure was reported, or is no matter now
            self._wait_begun()
        try:
            if not self._begun:
                pass  # the lease was not taken, or the store was found there: nothing of it is this writer's
            elif not self.append:
                remote.clear(keep=LEASE)
            else:
                from .reader import Store

                with Store(self.path) as existing:
                    committed = dict(existing.committed or {})
                b = open_backend(Path("."), "zarr", writable=True, remote=remote)
                for name in b.names():
                    arr = b.array(name)
                    if name in committed and arr.shape[0] != committed[name]:
                        arr.resize((committed[name], *arr.shape[1:]))
        except Exception:
            pass
        if self._lease is not None:
            self._lease.release()
            self._lease = None

    def _check_backend(self) -> None:
        """Raise a write the backend held back (HDF5 never sees its own failed writes)."""
        held = self.b.write_error()
        if held is not None:
            raise _write_error(held, self.path, self.append)

    def _discard(self) -> None:
        """Undo a transaction that failed to begin: nothing of it may remain."""
        backend = getattr(self, "b", None)
        if backend is not None:
            with contextlib.suppress(
                Exception
            ):  # a half-opened store fails to close in many ways; it is dropped
                backend.close()
        self._closed = True
        if self.remote is not None:
            if self._lease is not None:
                self._lease.release()
                self._lease = None
            return
        if self._journal_begun and journal.pending(self.path):
            journal.rollback(self.path)
        if self._tmp is not None and self._tmp.exists():
            shutil.rmtree(
                self._tmp, ignore_errors=True
            ) if self._tmp.is_dir() else self._tmp.unlink()
        for made in self._made_dirs:
            try:
                made.rmdir()
            except OSError:
                break

    def abort(self) -> None:
        """Drop everything this transaction wrote; the store is as it was."""
        if self._committed:
            return
        if self._worker is not None:
            self._queue.put(None)
            self._worker.join()
            self._worker = None
        backend = getattr(self, "b", None)
        if backend is not None:
            backend.settle()
        if not self._closed and backend is not None:
            try:
                backend.close()
            except Exception:
                pass
        self._closed = True
        if self.remote is not None:
            self._abort_remote()
            return
        if self.kind == "zarr" and self.append:
            if journal.pending(self.path):
                journal.rollback(self.path)
        elif self._tmp is not None and self._tmp.exists():
            shutil.rmtree(
                self._tmp, ignore_errors=True
            ) if self._tmp.is_dir() else self._tmp.unlink()
        for made in self._made_dirs:  # deepest first; a failed ingest leaves no empty folders
            try:
                made.rmdir()
            except OSError:
                break

    def __enter__(self) -> StoreWriter:
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is not None or not self._committed:
            self.abort()

    # -- data ---------------------------------------------------------------------------------------
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
        self._submit(lambda: self._write_now(signal, labels))

    def _submit(self, job: Callable[[], None]) -> None:
        """Run ``job`` in the writer thread, after the jobs before it."""
        if self._worker is None:
            self._queue: queue.Queue[Callable[[], None] | None] = queue.Queue(maxsize=2)
            self._worker = threading.Thread(target=self._work, name="chunkfit-writer", daemon=True)
            self._worker.start()
        self._queue.put(job)

    def _work(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            if self._worker_error is not None:
                continue
            try:
                job()
            except BaseException as err:  # re-raised in the caller's thread
                self._worker_error = err

    def _raise_worker_error(self) -> None:
        gate = self.remote.gate if self.remote is not None else None
        if (
            self._worker_error is None
            and gate is not None
            and gate.done()
            and gate.exception() is not None
        ):
            self._worker_error = (
                gate.exception()
            )  # the lease or the check that no store is there failed
        if self._worker_error is not None:
            err, self._worker_error = self._worker_error, None
            self._failed = True
            if self.remote is not None and isinstance(err, Exception):
                raise translate(
                    self.remote.url,
                    err,
                    "the store is unchanged" if self.append else "no store was created",
                )
            raise err

    def _drain(self) -> None:
        if self._worker is not None:
            self._queue.put(None)
            self._worker.join()
            self._worker = None
        self._raise_worker_error()

    def _write_now(self, signal: np.ndarray, labels: np.ndarray | None) -> None:
        n = signal.shape[0]
        block = np.ascontiguousarray(signal, dtype=np.float32)
        merge_stats(self.stats, self.channels, block)
        self._pending.append(block)
        if labels is not None:
            lab = np.asarray(labels, dtype=np.int32)
            vals, counts = np.unique(lab, return_counts=True)
            for v, c in zip(vals.tolist(), counts.tolist()):
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
            self.b.write_rows("signal", self.length, sig[:take])
            if lab is not None:
                self.b.write_rows("labels", self.length, lab[:take])
        except OSError as err:
            raise _write_error(err, self.path, self.append) from None
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
        """The store's last segment, which starts at ``start``, now ends at ``stop``: a live stream's
        recording continues across its commits as one segment."""
        self._extend = (int(start), int(stop))

    def add_events(self, indices: np.ndarray) -> None:
        """Absolute, sorted event sample indices (must lie in this transaction's samples)."""
        if indices.size:
            self._events.append(np.asarray(indices, dtype=np.int64))
        self.attrs["has_events"] = True

    def add_source(self, record: dict[str, Any]) -> None:
        self._sources.append(record)

    def _write_small(self) -> None:
        if self._extend is not None:
            n = self.b.length("segments")
            tail = self.b.rows("segments", n - 1, n).reshape(-1, 2) if n else np.zeros((0, 2))
            if not tail.size or int(tail[0, 0]) != self._extend[0]:
                raise StoreFormatError(
                    f"{self.path}: the last segment does not start at {self._extend[0]}; cannot extend it"
                )
            self.b.write_rows("segments", n - 1, np.asarray([self._extend], dtype=np.int64))
        if self._segments:
            seg = np.asarray(self._segments, dtype=np.int64)
            self.b.write_rows("segments", self.b.length("segments"), seg)
        if self._events:
            ev = np.unique(np.concatenate(self._events))
            n0 = self.b.length("events")
            if n0:
                last = int(self.b.rows("events", n0 - 1, n0)[0])
                if ev.size and ev[0] <= last:
                    raise StoreFormatError(
                        f"{self.path}: new events must come after the stored ones"
                    )
            if ev.size:
                self.b.write_rows("events", n0, ev)

"""A transaction on a store on object storage: one writer at a time under the store's lease, and
the root ``zarr.json``, written last, as the commit point (``remote``)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

import numpy as np

from ..errors import ChunkfitError, StoreExistsError, UsageError
from . import transaction
from .backend import Backend
from .layout import committed_last_segment
from .lease import LEASE, Lease
from .newzarr import NewZarrBackend
from .reader import Store
from .remote import ROOT, Remote
from .s3errors import guarded, translate
from .transaction import Finished, Opened
from .zarrbackend import ZarrBackend


class LeaseCommit:
    """A new store's begin (the lease, the check that no store is there, the removal of a killed
    ingest's objects) runs in a thread of its own while the caller parses and the writer thread
    encodes; chunk uploads wait for it (``Remote.hold_uploads_until``). An append begins at once:
    it reads the rows it extends."""

    def __init__(self, url: str, kind: str, append: bool) -> None:
        self.remote = Remote(url)
        self.path = self.remote.url
        self.kind = kind
        self.append = append
        self.lease: Lease | None = None
        self._begun = False  # this writer holds the lease and may delete what it wrote
        self._behind: Future[None] | None = None  # a new store's begin, running behind

    def _kept(self) -> str:
        return "the store is unchanged" if self.append else "no store was created"

    def begin(self) -> Opened | None:
        self._refuse_hdf5()
        if self.append:
            return guarded(self.path, "nothing was written", self._open_append)
        done: Future[None] = Future()

        def run() -> None:
            try:
                self._take_new()
            except BaseException as err:  # raised by the next write, the commit or the uploads
                done.set_exception(err)
            else:
                done.set_result(None)

        self._behind = done
        self.remote.hold_uploads_until(done)
        threading.Thread(target=run, name="chunkfit-begin", daemon=True).start()
        return None

    def _refuse_hdf5(self) -> None:
        if self.kind != "zarr":
            raise UsageError(
                f"{self.path}: HDF5 stores are not supported on object storage; ingest into a "
                ".zarr store instead"
            )

    def _exists(self) -> StoreExistsError:
        return StoreExistsError(
            f"{self.path}: already exists; use --append to add to it or pick a new name"
        )

    def _take_new(self) -> None:
        """Take the lease where no store is; remove a killed ingest's objects."""
        if self.remote.get(ROOT) is not None:
            raise self._exists()  # before the lease, so the message is not "busy"
        self.lease = Lease(self.remote)
        self.lease.acquire()
        if self.remote.get(ROOT) is not None:  # committed meanwhile by the lease's last holder
            raise self._exists()
        self._begun = True
        self.remote.clear(keep=LEASE)

    def _open_append(self) -> Opened:
        """Take the lease and open the store; its arrays are cut back to their committed lengths
        (an append cut short)."""
        self.lease = Lease(self.remote)
        self.lease.acquire()
        # The root only (its segments and events are not read): the rows this append extends are
        # fetched by ``open_for_append``, with the arrays' own documents, in one round trip.
        with Store(self.path, contents=False) as existing:
            attrs = dict(existing.attrs)
            committed = dict(existing.committed or {})
            root = existing.root_document
        self._begun = True
        backend = ZarrBackend(Path("."), True, self.remote, root)
        backend.open_for_append()
        for name in backend.names():
            arr = backend.array(name)
            if name in committed and arr.shape[0] != committed[name]:
                arr.resize((committed[name], *arr.shape[1:]))
        n, last = committed.get("segments", 0), committed_last_segment(str(self.path), attrs)
        if n and last is not None and backend.rows("segments", n - 1, n).tolist() != [list(last)]:
            # A commit cut short rewrote the last segment's row; the root kept the row as committed.
            backend.write_rows("segments", n - 1, np.asarray([last], dtype=np.int64))
        return Opened(backend, attrs)

    def create(self) -> Backend:
        return NewZarrBackend(Path("."), self.remote)

    def _wait_begun(self) -> None:
        """Wait for a new store's begin; raise its failure."""
        if self._behind is not None:
            self._behind.result()

    def commit(self, finish: Callable[[], Finished]) -> None:
        """Three round trips one after another: the last chunks and the array documents, sent beside
        the lease's renewal (which checks this is still the one writer); then the root
        ``zarr.json`` that commits them (every array's committed length, and every array's document
        at that length as consolidated metadata, which zarr and xarray read); then the lease's
        deletion."""
        self._wait_begun()
        self.remote.send_all_at_once()  # the last chunks of every array and the documents
        done = finish()
        attrs, backend = done.attrs, done.backend
        last = done.last_segment
        if last is None:
            last = committed_last_segment(str(self.path), attrs)
        attrs["committed"] = {n: backend.length(n) for n in backend.names()}
        if last is not None:  # see ``committed_last_segment``
            attrs["committed"]["last_segment"] = list(last)
        documents, root = backend.commit_documents(attrs)
        self.remote.put_behind(documents)
        if self.lease is not None:
            self.lease.confirm()  # no other process took the lease over
        self.remote.wait_for_writes()  # every chunk and document is stored before the root
        transaction.pause_before_commit()
        self.remote.put(ROOT, root)
        if self.lease is not None:
            self.lease.release()
            self.lease = None

    def abort(self) -> None:
        """A new store's objects are removed; an append's arrays are cut back to the committed
        lengths. Best effort: whatever stays is past what the root ``zarr.json`` commits, so no
        reader sees it."""
        with contextlib.suppress(BaseException):  # its failure was reported, or is no matter now
            self._wait_begun()
        try:
            if not self._begun:
                pass  # no lease taken, or a store was found there: nothing is this writer's
            elif not self.append:
                self.remote.clear(keep=LEASE)
            else:
                with Store(self.path) as existing:
                    committed = dict(existing.committed or {})
                backend = ZarrBackend(Path("."), True, self.remote)
                for name in backend.names():
                    arr = backend.array(name)
                    if name in committed and arr.shape[0] != committed[name]:
                        arr.resize((committed[name], *arr.shape[1:]))
        except Exception:
            pass
        self.discard()

    def discard(self) -> None:
        """Release the lease, if this writer took it."""
        if self.lease is not None:
            self.lease.release()
            self.lease = None

    def begin_failure(self) -> BaseException | None:
        behind = self._behind
        if behind is not None and behind.done():
            return behind.exception()
        return None

    def explain(self, err: BaseException) -> BaseException:
        if isinstance(err, ChunkfitError) or not isinstance(err, Exception):
            return err
        return translate(self.path, err, self._kept())

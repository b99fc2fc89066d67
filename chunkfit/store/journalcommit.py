"""An append to a local zarr store, made all or nothing by the rollback journal (``journal``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from . import journal, transaction
from .backend import Backend
from .backends import open_backend
from .reader import Store
from .transaction import Finished, Opened, seal, write_error


class JournalCommit:
    """The journal records what the append may change before it changes anything; removing the
    journal's manifest commits the append, and a rollback undoes it (also after ``kill -9``: the
    next process that opens the store rolls it back)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._begun = False  # the journal exists and is this writer's

    def begin(self) -> Opened:
        """Open the store (rolling back an interrupted append), then begin the journal."""
        with Store(self.path) as existing:  # validates, and rolls back an interrupted append
            attrs = dict(existing.attrs)
        journal.begin(self.path)
        self._begun = True
        return Opened(open_backend(self.path, "zarr", writable=True), attrs)

    def create(self) -> Backend:
        raise NotImplementedError("an append opens its store in begin()")

    def commit(self, finish: Callable[[], Finished]) -> None:
        """Write everything, then remove the journal's manifest: the commit point."""
        seal(finish())
        transaction.pause_before_commit()
        journal.commit(self.path)

    def abort(self) -> None:
        """Roll back what the append wrote."""
        if self._begun and journal.pending(self.path):
            journal.rollback(self.path)

    def discard(self) -> None:
        self.abort()

    def begin_failure(self) -> BaseException | None:
        return None

    def explain(self, err: BaseException) -> BaseException:
        return write_error(err, self.path, True) if isinstance(err, OSError) else err

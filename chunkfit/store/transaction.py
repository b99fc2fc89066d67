"""How a store writer's transaction begins, is made visible and is undone: the interface its commit
strategies implement (``JournalCommit``, ``ReplaceCommit``, ``LeaseCommit``), and what they share.

Test hook: ``CHUNKFIT_TEST_COMMIT_PAUSE=FLAG:SECONDS`` makes a commit, once everything but the
commit itself is written, create the local file FLAG and wait until it is deleted or SECONDS have
passed: tests kill the process at the last moment before a commit that way, not at a guessed one.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from .._fs import pause_on_flag
from ..errors import ChunkfitError, DiskFullError, ReadOnlyError
from .backend import Backend

COMMIT_PAUSE_HOOK = "CHUNKFIT_TEST_COMMIT_PAUSE"


def pause_before_commit() -> None:
    """The test hook of the module docstring; nothing unless ``COMMIT_PAUSE_HOOK`` is set."""
    hook = os.environ.get(COMMIT_PAUSE_HOOK)
    if hook:
        flag, _, seconds = hook.rpartition(":")
        pause_on_flag(Path(flag), float(seconds))


@dataclass
class Opened:
    """An existing store opened for an append: its backend, and its attributes as committed."""

    backend: Backend
    attrs: dict[str, Any]


@dataclass
class Finished:
    """A transaction with everything written but the commit: its backend, the attributes to commit,
    and the last segment it added or extended (None where it touched none)."""

    backend: Backend
    attrs: dict[str, Any]
    last_segment: tuple[int, int] | None


class CommitStrategy(Protocol):
    """How one kind of store makes a transaction all or nothing. The writer holds one, chosen by
    where the store is and whether the transaction appends (``StoreWriter.strategy``)."""

    @property
    def path(self) -> Path | str:
        """The store's path, or its ``s3://`` URL: what messages name."""
        ...

    def begin(self) -> Opened | None:
        """Begin the transaction. For an append, open the store, which can from then on always be
        put back as it was; for a new store, check that one may be made at the target and prepare
        where it is built (None)."""
        ...

    def create(self) -> Backend:
        """A new store's empty backend, where its arrays are made (in the writer thread, after
        ``begin``)."""
        ...

    def commit(self, finish: Callable[[], Finished]) -> None:
        """Have ``finish`` write everything buffered, then make the whole transaction visible at
        once. On a failure the writer calls ``abort``."""
        ...

    def abort(self) -> None:
        """Drop everything the transaction wrote (its backend is closed already): the store is as it
        was, and a new one was never made."""
        ...

    def discard(self) -> None:
        """Undo a transaction whose ``begin`` failed: nothing of it may remain."""
        ...

    def begin_failure(self) -> BaseException | None:
        """The failure of a part of ``begin`` that runs behind the caller, once it has failed; else
        None."""
        ...

    def explain(self, err: BaseException) -> BaseException:
        """``err`` as the one-line error the user can act on (a full disk, a read-only place, an
        endpoint out of reach), or as it is."""
        ...


def write_error(err: OSError, path: Path, append: bool) -> Exception:
    """A failed local write as the user's problem to act on (full disk, read-only place), or as it
    was."""
    if isinstance(err, ChunkfitError):
        return err
    outcome = "the store is unchanged" if append else "no store was created"
    if err.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
        return DiskFullError(
            f"{path}: no space left or file size limit reached while writing "
            f"({os.strerror(err.errno)}); free space and run the command again ({outcome})"
        )
    if err.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        if append:
            return ReadOnlyError(
                f"{path}: the store cannot be written ({os.strerror(err.errno)}); make it writable "
                f"to append to it ({outcome})"
            )
        return ReadOnlyError(
            f"{path}: the store cannot be created in {path.parent} ({os.strerror(err.errno)}); "
            "choose a writable folder"
        )
    return err


def seal(done: Finished) -> None:
    """Write a local transaction's attributes and close its backend; raise a write the backend held
    back (HDF5 never sees its own failed writes)."""
    done.backend.set_attrs(done.attrs)
    done.backend.close()
    held = done.backend.write_error()
    if held is not None:
        raise held

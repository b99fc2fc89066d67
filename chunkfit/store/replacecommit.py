"""A local store built as a temporary beside the target and renamed into place: a new store (zarr
folder or HDF5 file), or an append to an HDF5 file, which works on a copy of it (HDF5 files cannot
be rolled back in place)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

from .._fs import pid_alive
from ..errors import StoreExistsError, UsageError
from . import transaction
from .backend import Backend
from .backends import open_backend
from .reader import Store
from .transaction import Finished, Opened, seal, write_error

TMP_MARK = ".chunkfit-tmp-"


def clean_stale_temporaries(target: Path) -> None:
    """Remove temporaries left by killed writers of ``target`` (their pid is gone)."""
    prefix = f".{target.name}{TMP_MARK}"
    for p in target.parent.glob(prefix + "*"):
        pid = p.name[len(prefix) :]
        if pid.isdigit() and not pid_alive(int(pid)):
            _remove(p)


def _remove(p: Path) -> None:
    shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)


class ReplaceCommit:
    """The temporary is named after the writer's pid (``.NAME.chunkfit-tmp-PID``), so that a later
    writer removes a killed one's; the rename (``os.replace``) is the commit point."""

    def __init__(self, path: Path, kind: str, append: bool) -> None:
        self.path = path
        self.kind = kind
        self.append = append
        self._tmp = path.parent / f".{path.name}{TMP_MARK}{os.getpid()}"
        self._made: Path | None = None  # the temporary, once this writer made or copied it
        self._made_dirs: list[Path] = []  # folders made for a new store, deepest first

    def begin(self) -> Opened | None:
        if self.append:
            return self._copy()
        self._prepare()
        return None

    def _copy(self) -> Opened:
        """An HDF5 append works on a copy of the store."""
        with Store(self.path) as existing:  # validates it
            attrs = dict(existing.attrs)
        clean_stale_temporaries(self.path)
        self._made = self._tmp
        shutil.copy2(self.path, self._tmp)
        return Opened(open_backend(self._tmp, "hdf5", writable=True), attrs)

    def _prepare(self) -> None:
        """Check the target path and clear the temporary's name; the store itself is made by
        ``create``."""
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
        self._made = self._tmp
        if self._tmp.exists():
            shutil.rmtree(self._tmp) if self._tmp.is_dir() else self._tmp.unlink()

    def create(self) -> Backend:
        return open_backend(self._tmp, self.kind, writable=True, create=True)

    def commit(self, finish: Callable[[], Finished]) -> None:
        """Write everything into the temporary, then rename it over the target: the commit point."""
        seal(finish())
        transaction.pause_before_commit()
        if not self.append and self.path.exists():
            raise StoreExistsError(f"{self.path}: appeared while ingesting; nothing was written")
        os.replace(self._tmp, self.path)

    def abort(self) -> None:
        """Delete the temporary, and the folders made for it; a failed ingest leaves no empty
        folders."""
        if self._made is not None and self._made.exists():
            _remove(self._made)
        for made in self._made_dirs:  # deepest first
            try:
                made.rmdir()
            except OSError:
                break

    def discard(self) -> None:
        self.abort()

    def begin_failure(self) -> BaseException | None:
        return None

    def explain(self, err: BaseException) -> BaseException:
        return write_error(err, self.path, self.append) if isinstance(err, OSError) else err

"""How an open store tells that it changed on disk, and how an open waits out a local commit."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from ..errors import StoreFormatError
from . import journal
from .remote import ROOT, Remote, commit_stamp
from .s3errors import guarded

BUSY_WAIT = 2.0  # seconds an open waits for another process's commit to finish

Marks = tuple[bytes | None, ...]


def root_document(remote: Remote) -> bytes | None:
    """A store's root ``zarr.json`` on object storage, read now (None where there is none)."""
    return guarded(remote.url, "the store is unchanged", lambda: remote.get(ROOT))


def disk_stamp(path: Path, kind: str, remote: Remote | None) -> tuple[int, ...]:
    """Inode, size and mtime of the files an append or a rewrite changes (the signal's metadata);
    on object storage, a hash of the root ``zarr.json`` (the commit point)."""
    if remote is not None:
        return commit_stamp(root_document(remote)) or (-1,)
    files = [path / "zarr.json", path / "signal" / "zarr.json"] if kind == "zarr" else [path]
    out: list[int] = []
    for f in files:
        try:
            st = f.stat()
            out += [st.st_ino, st.st_size, st.st_mtime_ns]
        except OSError:
            out += [-1, -1, -1]
    return tuple(out)


def length_on_disk(path: Path, kind: str, remote: Remote | None) -> int | None:
    """The signal's committed length as stored now; None where it cannot be read."""
    try:
        if remote is not None:
            raw = root_document(remote)
            return int(json.loads(raw or b"")["attributes"]["chunkfit"]["committed"]["signal"])
        if kind == "zarr":
            return int(json.loads((path / "signal" / "zarr.json").read_text())["shape"][0])
        import h5py

        with h5py.File(path, "r") as f:
            return int(f["signal"].shape[0])
    except Exception:  # noqa: BLE001 - unreadable now: reported as changed, without a length
        return None


def wait_for_commit(path: Path) -> Marks:
    """Wait out a commit under way to a local zarr store (a few seconds at most), roll back an
    append whose writer died, and return the commit marks: the root and signal ``zarr.json`` as
    they are now."""
    deadline = time.monotonic() + BUSY_WAIT
    while journal.pending(path):
        pid = journal.writer(path)
        if pid is None:
            if not os.access(path, os.W_OK):
                raise StoreFormatError(
                    f"{path}: an interrupted append must be rolled back, but the store is read-only"
                )
            journal.rollback(path)
        elif pid == os.getpid() or time.monotonic() > deadline:
            raise journal.busy_error(path, pid)
        else:
            time.sleep(0.02)
    return commit_marks(path)


def commit_marks(path: Path) -> Marks:
    """The root and signal ``zarr.json`` of a local zarr store as they are now (None where
    absent)."""
    out: list[bytes | None] = []
    for f in (path / "zarr.json", path / "signal" / "zarr.json"):
        try:
            out.append(f.read_bytes())
        except OSError:
            out.append(None)
    return tuple(out)


def moved(path: Path, marks: Marks) -> bool:
    """Whether an append began or committed since ``marks`` were taken."""
    return journal.pending(path) or commit_marks(path) != marks

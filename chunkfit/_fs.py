"""File-system helpers: directory fsync (store journal, run checkpoints), the lock that gives a run
folder or an output file one writing process, the size of a folder, and the flag file the test
hooks pause on."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from .errors import UsageError

# A scheme of two letters or more (``s3://``, ``gs://``, ``https://``; ``Path`` turns ``//`` into
# ``/``), so that ``C:/`` stays a path.
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+-]+):/")


def refuse_url(path: str | os.PathLike[str], what: str, s3: bool = False) -> None:
    """A URL given where chunkfit takes a local path is refused, never taken for a folder named
    ``s3:``.

    ``s3=True`` where an ``s3://`` URL is supported (stores, run folders, outputs); other schemes
    and a URL mangled into a ``Path`` (``s3:/bkt``) are still refused.
    """
    text = os.fspath(path)
    if s3 and isinstance(text, str) and text.startswith("s3://"):
        return
    found = _URL.match(text) if isinstance(text, str) else None
    if found is not None:
        raise UsageError(
            f"{text}: {found.group(1)}:// URLs are not supported for {what}; give a local path "
            + ("or an s3:// URL" if s3 else "(copy the data from object storage first)")
        )


def pause_on_flag(flag: Path, seconds: float) -> None:
    """For the test hooks: create ``flag`` and wait until someone deletes it or ``seconds`` pass."""
    deadline = time.monotonic() + seconds
    flag.touch()
    while flag.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    flag.unlink(missing_ok=True)


def fsync_dir(path: Path) -> None:
    """Flush a directory's entries (renames, unlinks) to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Locked(Exception):
    """``FileLock.acquire`` found the file held by another live process (``pid``; 0 when
    unknown)."""

    def __init__(self, pid: int) -> None:
        super().__init__(pid)
        self.pid = pid


class FileLock:
    """An exclusive lock on ``path`` held by this process: ``fcntl.flock``, so it dies with its
    process.

    A lock file left behind by a killed process is therefore no obstacle: the next ``acquire`` takes
    it at once. ``acquire`` changes nothing in an existing file, so a process that takes the lock,
    then finds it has nothing to do, leaves the folder as it was; ``claim`` writes the holder's pid
    into it (for other processes' messages). ``release`` removes the file if this process claimed or
    made it.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._owned = False  # made or claimed by this process: removed on release

    def acquire(self) -> None:
        """Take the lock, or raise ``Locked`` naming the process that holds it; OSError when the
        file cannot be opened or made."""
        import fcntl

        while True:
            try:
                fd, made = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644), True
            except FileExistsError:
                try:
                    fd, made = os.open(self.path, os.O_RDWR), False
                except FileNotFoundError:
                    continue  # released and removed meanwhile: make it anew
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_pid(fd)
                os.close(fd)
                raise Locked(holder) from None
            # The previous holder removes the file as it releases it: a file opened just before
            # that is no longer the lock file, and locking it would let two processes in.
            try:
                current = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                current = False
            if current:
                self._fd, self._owned = fd, made
                return
            os.close(fd)

    def claim(self) -> None:
        """Write this process's pid into the held lock file."""
        assert self._fd is not None, "claim() needs the lock"
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"{os.getpid()}\n".encode(), 0)
        self._owned = True

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            if self._owned:
                self.path.unlink(missing_ok=True)
        except OSError:
            pass  # a folder made read-only keeps the file: without the flock it locks nothing
        finally:
            os.close(fd)


def dir_size(path: Path) -> int:
    """Bytes in the file ``path``, or in every file under the folder ``path``."""
    if path.is_file():
        return path.stat().st_size
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (one of another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read_pid(fd: int) -> int:
    """The pid a lock's holder wrote, or 0 while it has written none (or names a process gone)."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return 0
    pid = int(text) if text.isdigit() else 0
    return pid if pid > 0 and pid_alive(pid) else 0

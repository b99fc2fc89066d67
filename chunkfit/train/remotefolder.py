"""A run folder on object storage (``s3://bucket/runs/a``): the local run folder's logic on a
staging folder, mirrored to the bucket at each point where the local folder is made consistent.

Objects: ``run.json``, ``model.keras``, ``history.csv``, ``curves.png``; each checkpoint under
``checkpoints/<sequence>/`` (``arrays.npz``, ``history.csv``, ``state.json``), and
``checkpoint.json``, the pointer to the current one, written only once every object of that
checkpoint is stored; the previous checkpoint is deleted after the pointer moved. A kill at any
moment leaves the pointer on a complete checkpoint, and any process (on any machine) resumes from
it. One process at a time holds the run's lease object (as a store's, chunkfit.store.remote). With
several workers that process is the chief; the others read its probe and, through the pointer, its
current checkpoint (``RemotePeerFolder``), take no lease and write nothing.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from ..errors import BusyError
from ..store.lease import LEASE, Lease
from ..store.remote import Remote
from ..store.s3errors import guarded
from . import checkpoint
from .runfolder import (
    CURVES_FILE,
    HISTORY_FILE,
    MODEL_FILE,
    RUN_FILE,
    RUN_FILES,
    PeerFolder,
    RunFolder,
)

POINTER = "checkpoint.json"
T = TypeVar("T")


class RemoteRunFolder(RunFolder):
    """``RunFolder`` for an ``s3://`` URL; see the module docstring."""

    def __init__(self, url: str, resume: str = "auto", run: dict[str, Any] | None = None) -> None:
        self.remote = Remote(url)
        self.shown = str(self.remote.url)
        self._lease = Lease(self.remote, doing="training into this run folder", busy=BusyError)
        self._call("nothing was changed", self._lease.acquire)
        self._stage = Path(tempfile.mkdtemp(prefix="chunkfit-run-"))
        self._current: str | None = None  # the prefix checkpoint.json names
        try:
            local = self._stage / "run"
            self._call("nothing was changed", lambda: self._download(local))
            super().__init__(local, resume, run)
        except BaseException:
            self._lease.release()
            shutil.rmtree(self._stage, ignore_errors=True)
            raise

    def _call(self, kept: str, call: Callable[[], T]) -> T:
        return guarded(self.remote.url, kept, call)

    def _download(self, local: Path) -> None:
        """The run's files and its current checkpoint into ``local`` (left absent for a new run)."""
        keys = set(self.remote.keys())
        wanted = {name: self.remote.get(name) for name in RUN_FILES if name in keys}
        pointer = self.remote.get(POINTER) if POINTER in keys else None
        if not wanted and pointer is None:
            return
        local.mkdir()
        for name, data in wanted.items():
            if data is not None:
                (local / name).write_bytes(data)
        if pointer is not None:
            self._current = fetch_checkpoint(
                self.remote, pointer, keys, local / checkpoint.CHECKPOINT
            )

    def _upload(self, names: list[str]) -> None:
        kept = "the run's objects uploaded before it are intact; run the same command to resume"
        files = {n: (self.path / n).read_bytes() for n in names if (self.path / n).is_file()}
        self._call(kept, lambda: self.remote.put_many(files))

    # -- the points where the local folder is consistent -------------------------------------------
    def write_checkpoint(self, state: dict[str, Any], arrays: dict[str, Any]) -> None:
        super().write_checkpoint(state, arrays)
        folder = self.path / checkpoint.CHECKPOINT
        prefix = f"checkpoints/{int(state['sequence']):08d}"
        objects = {f"{prefix}/{p.name}": p.read_bytes() for p in folder.iterdir() if p.is_file()}
        kept = "the previous checkpoint is intact there; run the same command to resume"
        self._call(kept, lambda: self.remote.put_many(objects))
        pointer = json.dumps({"sequence": int(state["sequence"]), "prefix": prefix}).encode()
        self._lease.confirm()  # still the run's one process: no other took its lease over
        self._call(
            kept, lambda: self.remote.put(POINTER, pointer)
        )  # the checkpoint is complete: point at it
        old, self._current = self._current, prefix
        if old is not None and old != prefix:
            self._call("the new checkpoint is intact there", lambda: self._delete_prefix(old))

    def write_probe(self, name: str, text: str) -> None:
        self._call("nothing was changed", lambda: self.remote.put(name, text.encode()))

    def remove_probe(self, name: str) -> None:
        self._call("nothing else was changed", lambda: self.remote.delete([name]))

    def _delete_prefix(self, prefix: str) -> None:
        self.remote.delete(k for k in self.remote.keys(prefix))

    def remove_checkpoint(self) -> None:
        super().remove_checkpoint()
        self._call("the run's files are intact there", self._remove_remote_checkpoints)

    def _remove_remote_checkpoints(self) -> None:
        self.remote.delete([POINTER])
        self._delete_prefix("checkpoints")
        self._current = None

    def write_json(self, record: dict[str, Any]) -> None:
        super().write_json(record)
        self._upload([HISTORY_FILE, RUN_FILE])

    def save_model(self, model: Any) -> None:
        super().save_model(model)
        self._upload([MODEL_FILE])

    def plot(self, history: dict[str, list[float]]) -> None:
        super().plot(history)
        self._upload([CURVES_FILE])

    def _remove_run(self) -> None:
        super()._remove_run()
        self._call("nothing was changed", lambda: self.remote.clear(keep=LEASE))
        self._current = None

    def close(self, *, failed: bool = False) -> None:
        try:
            super().close(failed=failed)
        except Exception:
            if not failed:
                # after a failure the first error is the one to report; leftovers are a new run's to
                # clear
                raise
        finally:
            self._lease.release()
            shutil.rmtree(self._stage, ignore_errors=True)


class RemotePeerFolder(PeerFolder):
    """``PeerFolder`` for an ``s3://`` run folder: the chief's probe and its current checkpoint (the
    one ``checkpoint.json`` names, downloaded into a staging folder that ``close`` removes), read
    without the run's lease, which only the chief holds."""

    def __init__(self, url: str) -> None:  # no local path: PeerFolder's own does not apply
        self.remote = Remote(url)
        self.shown = str(self.remote.url)
        self._stage: Path | None = None

    def _call(self, call: Callable[[], T]) -> T:
        return guarded(self.remote.url, "nothing was changed", call)

    def read_probe(self, name: str) -> str | None:
        data = self._call(lambda: self.remote.get(name))
        return None if data is None else data.decode(errors="replace")

    def latest(self) -> checkpoint.Checkpoint | None:
        pointer = self._call(lambda: self.remote.get(POINTER))
        if pointer is None:
            return None
        self.close()
        self._stage = Path(tempfile.mkdtemp(prefix="chunkfit-peer-"))
        folder, remote, prefix = (
            self._stage / checkpoint.CHECKPOINT,
            self.remote,
            json.loads(pointer)["prefix"],
        )
        self._call(lambda: fetch_checkpoint(remote, pointer, remote.keys(prefix), folder))
        return checkpoint.read(folder)

    def close(self) -> None:
        if self._stage is not None:
            shutil.rmtree(self._stage, ignore_errors=True)
            self._stage = None


def fetch_checkpoint(remote: Remote, pointer: bytes, keys: Iterable[str], folder: Path) -> str:
    """The objects of the checkpoint ``pointer`` (``checkpoint.json``'s bytes) names, among
    ``keys``, into the new folder ``folder``; returns its prefix."""
    prefix = json.loads(pointer)["prefix"]
    folder.mkdir()
    for key in keys:
        if key.startswith(prefix + "/"):
            (folder / key[len(prefix) + 1 :]).write_bytes(remote.get(key) or b"")
    return str(prefix)

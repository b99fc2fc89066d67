"""Checkpoints on disk: written so that a crash at any moment leaves a complete one behind.

A checkpoint is a folder in the run folder holding ``arrays.npz`` (model, optimizer, metric,
callback and RNG arrays), ``history.csv`` (a copy of the run's history at that moment) and
``state.json`` (cursor, history, epoch records, callback state), written last: a folder whose
state.json is missing, unreadable or lists files of other sizes is incomplete and never used.

A new checkpoint is written to ``checkpoint.tmp/``; then ``checkpoint/`` is renamed to
``checkpoint.old/``, ``checkpoint.tmp/`` to ``checkpoint/``, and ``checkpoint.old/`` is removed.
Once the first checkpoint exists, a crash at any moment leaves at least one complete checkpoint
under one of those three names; ``latest`` picks the complete one with the highest sequence number
and ``promote_newest`` gives it back the name ``checkpoint/``. This module needs no TensorFlow.

Test hook: ``CHUNKFIT_TEST_CHECKPOINT_PAUSE=N:SECONDS`` makes the N-th checkpoint a process writes
(1-based) create ``checkpoint.tmp/PAUSED`` once its arrays are on disk and wait, before writing its
state.json, until that file is deleted or SECONDS have passed: tests kill the process in the middle
of a checkpoint write that way, or change something while it waits.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from .._fs import fsync_dir, pause_on_flag

CHECKPOINT = "checkpoint"
NAMES = (CHECKPOINT, CHECKPOINT + ".tmp", CHECKPOINT + ".old")
ARRAYS_FILE = "arrays.npz"
HISTORY_COPY = "history.csv"
STATE_FILE = "state.json"
PAUSE_HOOK = "CHUNKFIT_TEST_CHECKPOINT_PAUSE"
PAUSED = "PAUSED"

_written = 0  # checkpoints this process wrote, for the test hook


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """A complete checkpoint folder and its parsed state.json."""

    path: Path
    state: dict[str, Any]

    @property
    def sequence(self) -> int:
        return int(self.state["sequence"])

    def arrays(self) -> dict[str, np.ndarray]:
        """Every array of the checkpoint by name (pickles refused: a run folder may come from
        elsewhere)."""
        with np.load(self.path / ARRAYS_FILE, allow_pickle=False) as data:
            return {name: data[name] for name in data.files}

    def history_csv(self) -> Path | None:
        path = self.path / HISTORY_COPY
        return path if path.is_file() else None


def read(path: Path) -> Checkpoint | None:
    """The checkpoint in folder ``path``, or None if it is missing or incomplete."""
    try:
        state = json.loads((path / STATE_FILE).read_text())
        files = state["files"]
        for name, size in files.items():
            if (path / name).stat().st_size != size:
                return None
        int(state["sequence"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return Checkpoint(path, state)


def latest(run: Path) -> Checkpoint | None:
    """The newest complete checkpoint of run folder ``run``, under whichever name it survived."""
    found = [c for c in (read(run / name) for name in NAMES) if c is not None]
    return max(found, key=lambda c: c.sequence, default=None)


def promote_newest(run: Path) -> Checkpoint | None:
    """Give the newest complete checkpoint the name ``checkpoint/`` and remove the others."""
    best = latest(run)
    if best is not None and best.path.name != CHECKPOINT:
        # Safe at any moment: until the rename, ``best`` is still found under its temporary name.
        shutil.rmtree(run / CHECKPOINT, ignore_errors=True)
        os.replace(best.path, run / CHECKPOINT)
        fsync_dir(run)
        best = Checkpoint(run / CHECKPOINT, best.state)
    for name in NAMES[1:]:
        shutil.rmtree(run / name, ignore_errors=True)
    return best


def write(
    run: Path, state: dict[str, Any], arrays: dict[str, np.ndarray], history: Path | None
) -> None:
    """Write a new checkpoint into ``run`` and make it the current one; see the module docstring.

    On an error (a full disk, say) the temporary folder is removed and the previous checkpoint
    stays.
    """
    global _written
    _written += 1
    tmp = run / NAMES[1]
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir()
        with open(tmp / ARRAYS_FILE, "wb") as f:
            np.savez(f, **arrays)  # type: ignore[arg-type]
            _sync(f)
        files = {ARRAYS_FILE: (tmp / ARRAYS_FILE).stat().st_size}
        if history is not None and history.is_file():
            shutil.copyfile(history, tmp / HISTORY_COPY)
            files[HISTORY_COPY] = (tmp / HISTORY_COPY).stat().st_size
        _test_pause(tmp)
        with open(tmp / STATE_FILE, "w") as f:
            json.dump({**state, "files": files}, f)
            _sync(f)
        fsync_dir(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    current, old = run / CHECKPOINT, run / NAMES[2]
    if current.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(current, old)
    os.replace(tmp, current)
    fsync_dir(run)
    shutil.rmtree(old, ignore_errors=True)


def remove(run: Path) -> None:
    """Remove every checkpoint of ``run`` (once the run has finished)."""
    for name in NAMES:
        shutil.rmtree(run / name, ignore_errors=True)


def _sync(f: Any) -> None:
    f.flush()
    os.fsync(f.fileno())


def _test_pause(tmp: Path) -> None:
    hook = os.environ.get(PAUSE_HOOK)
    if hook:
        n, _, seconds = hook.partition(":")
        if int(n) == _written:
            pause_on_flag(tmp / PAUSED, float(seconds))

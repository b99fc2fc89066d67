"""The run folder: model.keras, history.csv, run.json, curves.png and the checkpoint, owned by one
process.

The folder is checked before any training starts, and run.json is rewritten (atomically) after
every epoch so an interrupted run still says how far it got. A process that trains into a folder
holds its lock (``LOCK_FILE``, an ``fcntl.flock`` that dies with the process) from the first check
to the end: a second process on the same folder is refused, whatever state the folder is in, and
after a ``kill -9`` the same command resumes at once. With several workers that process is the
chief; the others read the folder through ``PeerFolder`` and write nothing.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

from .._fs import FileLock, Locked, refuse_url
from ..errors import (
    BusyError,
    ChunkfitError,
    DiskFullError,
    IncompatibleError,
    RunError,
    UsageError,
)
from . import checkpoint

MODEL_FILE = "model.keras"
HISTORY_FILE = "history.csv"
RUN_FILE = "run.json"
CURVES_FILE = "curves.png"
LOCK_FILE = ".chunkfit.lock"
RESUME_MODES = ("auto", "resume", "restart")
RUN_FILES = (RUN_FILE, RUN_FILE + ".tmp", MODEL_FILE, HISTORY_FILE, CURVES_FILE)
# Settings newer versions added to a run's identity, with what versions before them did.
_EARLIER_DEFAULTS = {"normalize": "none", "class_weight": "none", "augment": "none"}
DISK_FULL = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)
WRITE_ERRORS = (*DISK_FULL, errno.EACCES, errno.EPERM, errno.EROFS)


def busy_message(path: Path | str, what: str, pid: int) -> str:
    """ "PATH: WHAT in use by process PID; wait for it or stop it", for a lock held elsewhere."""
    holder = f"process {pid}" if pid else "another process"
    return f"{path}: {what} in use by {holder}; wait for it or stop it"


class RunFolder:
    """The folder of one training run: a new one, or one whose unfinished run is resumed.

    Construction takes the folder's lock (making the folder if it is new) and checks, cheaply and
    before TensorFlow loads: ``resume`` is "auto" (resume a run that has a checkpoint, else start a
    new one), "resume" (there must be a checkpoint) or "restart" (a run already there is deleted and
    started over); a checkpoint must have been made by ``run`` (``check_matches``). A refused run
    leaves the folder as it was. ``create`` deletes an old run on restart only once every other
    check has passed, so a refused run changes nothing. ``close`` releases the lock; with
    ``failed``, a new run that saved nothing leaves no folder behind.
    """

    def __init__(
        self, path: str | os.PathLike[str], resume: str = "auto", run: dict[str, Any] | None = None
    ) -> None:
        refuse_url(path, "run folders", s3=True)
        self.path = Path(path)
        self.shown = getattr(
            self, "shown", str(self.path)
        )  # the folder in messages (an s3:// run's URL)
        if resume not in RESUME_MODES:
            raise UsageError(
                f"resume must be one of {', '.join(RESUME_MODES)} (received {resume!r})"
            )
        self.restart = resume == "restart"
        self.resume_only = resume == "resume"
        self.saved = False  # a checkpoint or run.json written by this process
        self.ready = False  # create() ran: what the folder holds from here on is this run's
        self.checkpoint: checkpoint.Checkpoint | None = None
        if self.path.exists() and not self.path.is_dir():
            raise RunError(f"{self.shown}: the run folder is a file; use another --out")
        self._check_writable()
        self.created = not self.path.exists()
        self._lock = FileLock(self.path / LOCK_FILE)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            self._lock.acquire()
        except Locked as held:
            raise BusyError(busy_message(self.shown, "run", held.pid)) from None
        except OSError as err:
            self._remove_if_created()
            raise RunError(
                f"{self.shown}: the run folder cannot be written ({err.strerror or err}); use "
                "another --out"
            ) from None
        try:
            self.checkpoint = self._check_state()
            if run is not None:
                self.check_matches(run)
        except BaseException:
            self._lock.release()
            self._remove_if_created()
            raise
        self._lock.claim()  # the run is this process's: other processes' messages name it

    def _check_writable(self) -> None:
        found = checkpoint.latest(self.path) if self.path.is_dir() and not self.restart else None
        parent = self.path
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
        if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
            reason = "Not a directory" if not parent.is_dir() else "Permission denied"
            hint = (
                "make it writable to resume the run, or use another --out"
                if found
                else "use another --out"
            )
            raise RunError(f"{self.shown}: the run folder cannot be written ({reason}); {hint}")

    def _check_state(self) -> checkpoint.Checkpoint | None:
        """The checkpoint to resume from, read under the lock; refuses a folder this run cannot
        use."""
        if self.restart:
            return None
        found = checkpoint.latest(self.path)
        if _finished(self.path / RUN_FILE):
            raise RunError(
                f"{self.shown}: the folder holds a finished run; pass --restart to delete it and "
                "train again, or use another --out"
            )
        if found is None:
            taken = [f for f in (RUN_FILE, MODEL_FILE) if (self.path / f).exists()]
            if taken:
                raise RunError(
                    f"{self.shown}: the folder already holds a run ({taken[0]}) with no checkpoint "
                    "to resume from; "
                    "pass --restart to delete it and start over, or use another --out"
                )
            if self.resume_only:
                where = (
                    "the folder does not exist" if self.created else "no checkpoint in the folder"
                )
                raise RunError(
                    f"{self.shown}: there is no run to resume ({where}); leave out --resume to "
                    "start a new run"
                )
        return found

    def check_matches(self, run: dict[str, Any]) -> None:
        """Refuse to resume a checkpoint made with other settings, another model or another store.

        ``run`` holds ``config`` (FitOptions.to_dict()), ``model`` (the model spec) and ``store``
        (Store.identity) of the run being started.
        """
        if self.checkpoint is None:
            return
        made = self.checkpoint.state["run"]
        # Settings added since a checkpoint was made: what that version did.
        made = {**made, "config": {**_EARLIER_DEFAULTS, **made["config"]}}
        fix = (
            "run the command the run was made with to resume it, pass --restart to start over, or "
            "use another --out"
        )
        # A setting the run's identity leaves out (how fast, not what, is trained) may still be in
        # the identity of a checkpoint made by an earlier version: it is no reason to refuse.
        settings = [
            d for d in _differences(made["config"], run["config"]) if _holds(run["config"], d[0])
        ]
        if settings:
            key, old, new = settings[0]
            raise IncompatibleError(
                f"{self.shown}: the run was made with --{key.rpartition('.')[2].replace('_', '-')} "
                f"{_shown(old)}, not {_shown(new)}; {fix}"
            )
        if made["model"] != run["model"]:
            raise IncompatibleError(
                f"{self.shown}: the run was made with --model {made['model']}, not {run['model']}; "
                f"{fix}"
            )
        stores = _differences(made["store"], run["store"])
        if stores:
            key, old, new = stores[0]
            raise IncompatibleError(
                f"{self.shown}: the run was made on another store ({key} {_shown(old)} there, "
                f"{_shown(new)} in this one); {fix}"
            )

    def create(self) -> None:
        """Once every check has passed: make sure the folder takes files, delete an old run on
        restart, and give a resumed checkpoint its settled name (``self.checkpoint`` is then read
        from there)."""
        try:
            probe = self.path / ".chunkfit-write-test"
            probe.write_bytes(b"")
            probe.unlink()
            if self.restart:
                self._remove_run()
            elif self.checkpoint is not None:
                self.checkpoint = checkpoint.promote_newest(self.path)
            self.ready = True
        except OSError as err:
            raise RunError(
                f"{self.shown}: the run folder cannot be written ({err.strerror or err}); use "
                "another --out"
            ) from None

    def write_checkpoint(self, state: dict[str, Any], arrays: dict[str, Any]) -> None:
        """Make a new checkpoint (atomically: see chunkfit.train.checkpoint); OSError on a full disk
        and the like."""
        checkpoint.write(self.path, state, arrays, self.file(HISTORY_FILE))
        self.saved = True

    def remove_checkpoint(self) -> None:
        checkpoint.remove(self.path)

    def close(self, *, failed: bool = False) -> None:
        """Release the folder. After a failure, a new run that saved nothing leaves nothing behind:
        its files go, and the folder too when this run made it. Before ``create``, nothing is
        removed."""
        fresh = failed and self.checkpoint is None and not self.saved
        try:
            if fresh and self.ready:
                self._remove_run()
        finally:
            self._lock.release()
            if fresh:
                self._remove_if_created()

    def _remove_run(self) -> None:
        checkpoint.remove(self.path)
        for name in RUN_FILES:
            (self.path / name).unlink(missing_ok=True)

    def _remove_if_created(self) -> None:
        if self.created:
            try:
                self.path.rmdir()
            except OSError:
                pass  # something else was put there meanwhile: leave it

    def write_error(self, err: OSError, what: str, kept: str) -> ChunkfitError:
        """A failed write into the folder as one line; ``kept`` says which checkpoint is intact."""
        reason = err.strerror or str(err)
        again = "run the same command to resume" if kept else "run the same command to start again"
        if err.errno in DISK_FULL:
            return DiskFullError(
                f"{self.shown}: {what} cannot be written ({reason}: the disk is full or a "
                f"file-size limit was hit){kept}; free some space and {again}"
            )
        return RunError(
            f"{self.shown}: {what} cannot be written ({reason}){kept}; fix that and {again}"
        )

    def file(self, name: str) -> Path:
        return self.path / name

    def write_json(self, record: dict[str, Any]) -> None:
        tmp = self.file(RUN_FILE + ".tmp")
        tmp.write_text(json.dumps(record, indent=2, default=_jsonable) + "\n")
        os.replace(tmp, self.file(RUN_FILE))
        self.saved = True

    def save_model(self, model: Any) -> None:
        model.save(self.file(MODEL_FILE))

    def plot(self, history: dict[str, list[float]]) -> None:
        plot_curves(history, self.file(CURVES_FILE))

    def write_probe(self, name: str, text: str) -> None:
        """A small file the other workers of a multi-worker run read back
        (``PeerFolder.read_probe``)."""
        self.file(name).write_text(text)

    def remove_probe(self, name: str) -> None:
        self.file(name).unlink(missing_ok=True)


class PeerFolder:
    """The run folder as a worker other than the chief sees it (several workers,
    chunkfit.train.tensorflow.distributed): the chief's probe and its current checkpoint, read
    without the folder's lock; it writes nothing."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        refuse_url(path, "run folders", s3=True)
        self.path = Path(path)
        self.shown = str(self.path)

    def read_probe(self, name: str) -> str | None:
        """The text of the chief's probe ``name``, or None when there is none."""
        try:
            return (self.path / name).read_text()
        except FileNotFoundError:
            return None

    def latest(self) -> checkpoint.Checkpoint | None:
        """The checkpoint the chief settled (read once the chief created the run), or None."""
        return checkpoint.latest(self.path)

    def close(self) -> None:
        """Remove what was fetched to read the folder (nothing, for a local one)."""


def _finished(path: Path) -> bool:
    try:
        return json.loads(path.read_text()).get("finished") is True
    except (OSError, ValueError, AttributeError):
        return False


def _differences(old: Any, new: Any, key: str = "") -> list[tuple[str, Any, Any]]:
    """(dotted key, old, new) of every leaf where two JSON-like dicts differ."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [
            d
            for k in sorted(set(old) | set(new))
            for d in _differences(old.get(k), new.get(k), f"{key}.{k}" if key else k)
        ]
    return [] if old == new else [(key, old, new)]


def _holds(config: dict[str, Any], dotted: str) -> bool:
    """Whether ``config`` has the (dotted) key."""
    head, _, rest = dotted.partition(".")
    if head not in config:
        return False
    return not rest or (isinstance(config[head], dict) and _holds(config[head], rest))


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return "unset" if value is None else str(value)


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


AT_HALF = ("precision", "recall", "f1")  # Keras's metrics, taken at a score of 0.5


def panel_title(name: str) -> str:
    """A curves.png panel's title: the metric, and the threshold its figure was taken at when it
    is not the run's own (``precision``, ``recall`` and ``f1`` are at 0.5)."""
    bare = name.removeprefix("val_")
    return f"{name} (at threshold 0.5)" if bare in AT_HALF else name


def plot_curves(history: dict[str, list[float]], path: Path) -> None:
    """One panel per metric, training and validation per epoch."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .metrics import ordered

    # a figure measured on validation alone (the epoch's threshold, event F1) keeps its val_
    # name
    names = [
        k
        for k in ordered(history)
        if k not in ("learning_rate", "lr") and not (k.startswith("val_") and k[4:] in history)
    ]
    cols = min(max(len(names), 1), 3)
    rows = -(-max(len(names), 1) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.4 * rows), squeeze=False)
    for ax in axes.flat[len(names) :]:
        ax.axis("off")
    for ax, name in zip(axes.flat, names, strict=False):
        epochs = range(1, len(history[name]) + 1)
        ax.plot(
            epochs,
            history[name],
            "o-",
            label="validation" if name.startswith("val_") else "training",
        )
        if f"val_{name}" in history:
            ax.plot(epochs, history[f"val_{name}"], "s--", label="validation")
        ax.set_title(panel_title(name))
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)
        ax.legend()
        if len(history[name]) < 12:
            ax.set_xticks(list(epochs))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)

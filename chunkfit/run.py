"""The run folder: model.keras, history.csv, run.json and curves.png.

The folder is checked before any training starts, and run.json is rewritten (atomically) after
every epoch so an interrupted run still says how far it got.
"""

from __future__ import annotations

import json
import os
import resource
import sys
from pathlib import Path
from typing import Any

from .errors import RunError

MODEL_FILE = "model.keras"
HISTORY_FILE = "history.csv"
RUN_FILE = "run.json"
CURVES_FILE = "curves.png"


def peak_rss_bytes() -> int:
    """Peak resident memory of this process so far."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


class RunFolder:
    """A new, writable folder for one training run.

    Construction only checks (cheaply, before TensorFlow loads); ``create`` makes the folder once
    every other check has passed, so a refused run leaves nothing behind.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        taken = [f for f in (RUN_FILE, MODEL_FILE) if (self.path / f).exists()]
        if taken:
            raise RunError(
                f"{self.path}: the folder already holds a run ({taken[0]}); use another --out or delete it"
            )
        if self.path.exists() and not self.path.is_dir():
            raise RunError(f"{self.path}: the run folder is a file; use another --out")
        parent = self.path
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
        if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
            reason = "Not a directory" if not parent.is_dir() else "Permission denied"
            raise RunError(f"{self.path}: the run folder cannot be written ({reason}); use another --out")

    def create(self) -> None:
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            probe = self.path / ".chunkfit-write-test"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as err:
            raise RunError(
                f"{self.path}: the run folder cannot be written ({err.strerror or err}); use another --out"
            ) from None

    def file(self, name: str) -> Path:
        return self.path / name

    def write_json(self, record: dict[str, Any]) -> None:
        tmp = self.file(RUN_FILE + ".tmp")
        tmp.write_text(json.dumps(record, indent=2, default=_jsonable) + "\n")
        os.replace(tmp, self.file(RUN_FILE))

    def save_model(self, model: Any) -> None:
        model.save(self.file(MODEL_FILE))

    def plot(self, history: dict[str, list[float]]) -> None:
        plot_curves(history, self.file(CURVES_FILE))


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


def plot_curves(history: dict[str, list[float]], path: Path) -> None:
    """One panel per metric, training and validation per epoch."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = sorted((k for k in history if not k.startswith("val_") and k not in ("learning_rate", "lr")),
                   key=lambda k: (k != "loss", k))
    fig, axes = plt.subplots(1, max(len(names), 1), figsize=(5 * max(len(names), 1), 3.6), squeeze=False)
    for ax, name in zip(axes[0], names, strict=False):
        epochs = range(1, len(history[name]) + 1)
        ax.plot(epochs, history[name], "o-", label="training")
        if f"val_{name}" in history:
            ax.plot(epochs, history[f"val_{name}"], "s--", label="validation")
        ax.set_title(name)
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)
        ax.legend()
        if len(history[name]) < 12:
            ax.set_xticks(list(epochs))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)

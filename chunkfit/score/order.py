"""A run and a store given the wrong way round (``evaluate STORE RUN``), named as such."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import UsageError


def _is_store(path: Path) -> bool:
    return (path.is_dir() and (path / "zarr.json").is_file()) or (
        path.is_file() and path.suffix.lower() in (".h5", ".hdf5")
    )


def _is_run(path: Path) -> bool:
    if path.suffix == ".keras":
        return path.is_file()
    return path.is_dir() and any((path / n).is_file() for n in ("run.json", "model.keras"))


def check_run_then_store(
    run: str | os.PathLike[str], store: str | os.PathLike[str], command: str
) -> None:
    """Refuse a store given where the run goes and a run where the store goes."""
    if _is_store(Path(run)) and _is_run(Path(store)):
        raise UsageError(
            f"{run} is a store and {store} a run: the run comes first (chunkfit {command} "
            f"{store} {run})"
        )


def refuse_store_as_run(run: Path) -> None:
    """A store where the run goes, whatever was given after it, named as such (not as a run folder
    without model.keras)."""
    if _is_store(run):
        raise UsageError(
            f"{run} is a store, not a run: give the run folder (or .keras file) first, then the "
            "store"
        )

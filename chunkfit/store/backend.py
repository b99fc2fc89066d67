"""The interface every store backend implements: named arrays plus one JSON attribute."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


class Backend:
    """Arrays (zarr.Array or h5py.Dataset: both slice, resize and expose shape/dtype) and attrs."""

    kind = ""

    def __init__(self, path: Path, writable: bool) -> None:
        self.path = path
        self.writable = writable

    def names(self) -> list[str]:
        """The names of the store's arrays, sorted."""
        raise NotImplementedError

    def array(self, name: str) -> Any:
        """Array ``name`` (zarr.Array or h5py.Dataset)."""
        raise NotImplementedError

    def attrs(self) -> Any:
        """The store's ``chunkfit`` attribute as read (None where there is none)."""
        raise NotImplementedError

    def set_attrs(self, attrs: dict[str, Any]) -> None:
        """Replace the store's ``chunkfit`` attribute."""
        raise NotImplementedError

    def create(
        self, name: str, shape: tuple[int, ...], dtype: str, chunks: tuple[int, ...], codec: str
    ) -> Any:
        """Make array ``name``, growable along its first axis, compressed with ``codec``."""
        raise NotImplementedError

    def codec_name(self) -> str:
        """The signal's compression, in words (``chunkfit info``)."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the store; once closed, closing again does nothing."""

    def write_error(self) -> OSError | None:
        """The first write that failed (disk full, file size limit), when the backend held it
        back."""
        return None

    def wait_for_writes(self) -> None:
        """Wait until no write started by this process is still running."""

    def commit_documents(self, attrs: dict[str, Any]) -> tuple[dict[str, bytes], bytes]:
        """On object storage: the array documents to store before the commit (keyed as objects),
        and the root ``zarr.json`` that commits them, holding ``attrs`` and every array's document
        at its committed shape (consolidated metadata: what zarr and xarray read)."""
        raise NotImplementedError

    def length(self, name: str) -> int:
        """Length of array ``name`` along its first axis."""
        return int(self.array(name).shape[0])

    def rows(self, name: str, start: int, stop: int) -> np.ndarray:
        """Rows [start, stop) of array ``name``."""
        return np.asarray(self.array(name)[start:stop])

    def write_rows(self, name: str, start: int, rows: np.ndarray) -> None:
        """Grow array ``name`` to ``start + len(rows)`` along time and write ``rows`` from
        ``start``."""
        arr = self.array(name)
        end = start + rows.shape[0]
        arr.resize((end,) + tuple(arr.shape[1:]))
        arr[start:end] = rows

    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Every array's shape, by name."""
        return {n: tuple(int(s) for s in self.array(n).shape) for n in self.names()}

    def dtypes(self) -> dict[str, str]:
        """Every array's element type, by name."""
        return {n: str(np.dtype(self.array(n).dtype)) for n in self.names()}

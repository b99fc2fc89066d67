"""The backend that opens a store, chosen in one place: zarr v3 (``ZarrBackend``, or
``NewZarrBackend`` for a store being created) or HDF5 (``Hdf5Backend``), all behind ``Backend``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .backend import Backend
from .hdf5backend import Hdf5Backend
from .newzarr import NewZarrBackend
from .zarrbackend import ZarrBackend

if TYPE_CHECKING:
    from .remote import Remote


def open_backend(
    path: Path,
    kind: str,
    writable: bool = False,
    create: bool = False,
    remote: Remote | None = None,
    root: bytes | None = None,
) -> Backend:
    """The backend of the store at ``path`` (or on ``remote``): ``kind`` is ``zarr`` or ``hdf5``;
    ``create`` makes a new store there; ``root`` is a remote store's root document as just read."""
    if kind == "hdf5":
        return Hdf5Backend(path, writable, create)
    if create:
        return NewZarrBackend(path, remote)
    return ZarrBackend(path, writable, remote, root)

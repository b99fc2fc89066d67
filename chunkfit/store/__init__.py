"""The signal store: a zarr v3 directory or an HDF5 file with one logical layout."""

from __future__ import annotations

from .layout import FORMAT_VERSION, suffix_backend
from .reader import Store, open_store
from .writer import StoreWriter

__all__ = ["FORMAT_VERSION", "Store", "StoreWriter", "open_store", "suffix_backend"]

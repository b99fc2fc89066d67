"""A new zarr v3 store written without zarr (see ``zarrwrite``), in a local folder or on object
storage."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .backend import Backend
from .layout import ATTR_KEY, DIMENSIONS
from .zarrwrite import (
    array_metadata,
    chunk_encoder,
    encode_chunks,
    group_metadata,
    write_chunks,
    write_document,
)

if TYPE_CHECKING:
    from .remote import Remote


class NewZarrBackend(Backend):
    """A new zarr store, written without zarr (see ``zarrwrite``): it only grows, from sample 0.

    The chunk files are written as rows arrive; the ``zarr.json`` documents, which hold the
    shapes and the attributes, are written by ``close``. The folder is a temporary that the
    writer renames into place only after that.
    """

    kind = "zarr"

    def __init__(self, path: Path, remote: Remote | None = None) -> None:
        super().__init__(path, writable=True)
        self.remote = remote
        if remote is None:
            path.mkdir()
        self._meta: dict[str, dict[str, Any]] = {}
        self._encoders: dict[str, Any] = {}
        self._tails: dict[str, np.ndarray] = {}  # rows of each array's last, partial chunk
        self._attrs: dict[str, Any] = {}
        self._closed = False

    def names(self) -> list[str]:
        return sorted(self._meta)

    def length(self, name: str) -> int:
        return int(self._meta[name]["shape"][0])

    def set_attrs(self, attrs: dict[str, Any]) -> None:
        self._attrs = {ATTR_KEY: attrs}

    def create(
        self, name: str, shape: tuple[int, ...], dtype: str, chunks: tuple[int, ...], codec: str
    ) -> Any:
        if shape[0] != 0:
            raise ValueError("a new array starts empty")
        meta = array_metadata(shape, dtype, chunks, codec, DIMENSIONS[name])
        self._meta[name] = meta
        self._encoders[name] = chunk_encoder(meta)
        self._tails[name] = np.zeros((0,) + tuple(shape[1:]), dtype=dtype)
        if self.remote is None:
            (self.path / name).mkdir()

    def write_rows(self, name: str, start: int, rows: np.ndarray) -> None:
        meta = self._meta[name]
        if start != meta["shape"][0]:
            raise ValueError(
                f"{name}: a new array grows at its end ({meta['shape'][0]}), not at {start}"
            )
        step = int(meta["chunk_grid"]["configuration"]["chunk_shape"][0])
        tail = self._tails[name]
        first = (start - tail.shape[0]) // step
        rows = (
            np.concatenate([tail, rows.astype(tail.dtype, copy=False)]) if tail.shape[0] else rows
        )
        if self.remote is not None:
            chunks = encode_chunks(first, rows, step, self._encoders[name])
            self.remote.put_behind({f"{name}/{k}": v for k, v in chunks.items()})
        else:
            write_chunks(self.path / name, first, rows, step, self._encoders[name])
        keep = rows.shape[0] % step
        self._tails[name] = rows[rows.shape[0] - keep :].copy() if keep else rows[:0]
        meta["shape"][0] = start + (rows.shape[0] - tail.shape[0])

    def wait_for_writes(self) -> None:
        if self.remote is not None:
            try:
                self.remote.wait_for_writes()
            except Exception:  # noqa: BLE001 - this only waits; the failure was or will be reported
                pass

    def commit_documents(self, attrs: dict[str, Any]) -> tuple[dict[str, bytes], bytes]:
        docs = {f"{n}/zarr.json": json.dumps(m, indent=2).encode() for n, m in self._meta.items()}
        return docs, json.dumps(group_metadata({ATTR_KEY: attrs}, self._meta), indent=2).encode()

    def close(self) -> None:
        """Write the documents, the root ``zarr.json`` last. On object storage the writer stores
        ``commit_documents`` instead, so closing commits nothing there (an aborted store stays
        unseen)."""
        if self.remote is not None or self._closed:
            return
        for name, meta in self._meta.items():
            write_document(self.path / name / "zarr.json", meta)
        write_document(self.path / "zarr.json", group_metadata(self._attrs))
        self._closed = True

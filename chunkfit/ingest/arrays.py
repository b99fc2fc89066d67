"""Numeric arrays as sources: ``.npy`` files (memory-mapped after their header is checked, pickles
refused) and HDF5 datasets (``file.h5:/path``), read in blocks of rows.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..config import IngestOptions
from ..errors import SourceFormatError, SourceNotFoundError, UsageError
from .block import ParsedBlock
from .source import Source


class ArraySource(Source):
    """A 1-D or 2-D numeric array read in pieces: rows are samples, columns channels."""

    def __init__(
        self, name: str, array: Any, options: IngestOptions, size: int, closer: Any = None
    ) -> None:
        if options.time_column is not None or options.label_column is not None:
            raise UsageError(
                f"{name}: --time-column and --label-column apply to CSV sources only; use --rate"
            )
        if (
            array.ndim not in (1, 2)
            or not np.issubdtype(array.dtype, np.number)
            or np.issubdtype(array.dtype, np.complexfloating)
        ):
            raise SourceFormatError(
                f"{name}: expected a 1-D or 2-D real numeric array [time, channel], found shape "
                f"{array.shape} dtype {array.dtype}"
            )
        self.name = name
        self.array = array
        self.size = size
        self._closer = closer
        n_ch = 1 if array.ndim == 1 else int(array.shape[1])
        names = _channel_names(name, n_ch, options.names)
        self._cols = _chosen_columns(name, names, options.columns)
        self.channels = [names[i] for i in self._cols]
        row_bytes = max(1, array.dtype.itemsize * n_ch)
        self._step = max(1, options.block_bytes // row_bytes)
        self._hash = hashlib.sha256()
        if array.shape[0] == 0:
            raise SourceFormatError(f"{name}: empty source: the array has no rows")

    def blocks(self) -> Iterator[ParsedBlock]:
        n = int(self.array.shape[0])
        try:
            for a in range(0, n, self._step):
                piece = np.asarray(self.array[a : a + self._step])
                self._hash.update(np.ascontiguousarray(piece).tobytes())
                piece = piece.reshape(piece.shape[0], -1)[:, self._cols]
                with np.errstate(over="ignore"):
                    cast = piece.astype(np.float32)
                self._refuse_overflow(piece, cast, a)
                piece = cast
                self.rows += piece.shape[0]
                yield ParsedBlock(piece, None, None, a, b"", 0, self.name, "row")
        finally:
            if self._closer is not None:
                self._closer()

    def _refuse_overflow(self, source: np.ndarray, cast: np.ndarray, first_row: int) -> None:
        """Refuse finite values that float32 cannot hold (they would become Inf)."""
        inf = np.isinf(cast)
        if not inf.any():
            return
        over = inf & np.isfinite(source)
        if over.any():
            row, col = (int(v) for v in np.argwhere(over)[0])
            raise SourceFormatError(
                f"{self.name}: row {first_row + row} (counted from 0), column {col} (counted from "
                f"0): {float(source[row, col]):g} in channel {self.channels[col]!r} is beyond "
                f"float32 storage (largest magnitude {float(np.finfo(np.float32).max):.4g}); "
                "rescale the column"
            )

    def sha256(self) -> str:
        return self._hash.hexdigest()


def _channel_names(name: str, n_ch: int, given: Sequence[str] | None) -> list[str]:
    """``--names``, one per channel, else ch0, ch1, ..."""
    names = list(given) if given is not None else [f"ch{i}" for i in range(n_ch)]
    if len(names) != n_ch:
        raise UsageError(f"{name}: --names gives {len(names)} name(s) for {n_ch} channel(s)")
    return names


def _chosen_columns(name: str, names: list[str], columns: Sequence[str] | None) -> list[int]:
    """Indices of the channels ``--columns`` names (by name or 0-based position); all by default."""
    if columns is None:
        return list(range(len(names)))
    idx = []
    for c in columns:
        if c in names:
            idx.append(names.index(c))
        elif c.isdigit() and int(c) < len(names):
            idx.append(int(c))
        else:
            raise UsageError(
                f"{name}: --columns {c!r} is not a channel (channels: {', '.join(names)})"
            )
    twice = sorted({names[i] for i in idx if idx.count(i) > 1})
    if twice:
        raise UsageError(
            f"{name}: --columns names channel {twice[0]!r} twice; name each channel once"
        )
    return idx


def open_npy(spec: str, path: Path) -> np.ndarray:
    """Memory-map a .npy file after checking its header: pickles (object arrays) are never
    loaded."""
    fmt = np.lib.format
    with open(path, "rb") as f:
        if f.read(6) != b"\x93NUMPY":
            raise SourceFormatError(
                f"{spec}: not a .npy file (no NumPy header); save the array with numpy.save"
            )
        f.seek(0)
        try:
            version = fmt.read_magic(f)
            read_header = (
                fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
            )
            shape, _fortran, dtype = read_header(f)
        except (ValueError, EOFError, SyntaxError, TypeError) as err:
            raise SourceFormatError(
                f"{spec}: damaged .npy header ({err}); save the array again with numpy.save"
            ) from None
        data_at = f.tell()
    if dtype.hasobject:
        raise SourceFormatError(
            f"{spec}: the array holds Python objects (dtype {dtype}), which load only by "
            "unpickling; chunkfit never unpickles a file: save a plain numeric array"
        )
    expected = data_at + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    size = path.stat().st_size
    if size < expected:
        raise SourceFormatError(
            f"{spec}: truncated .npy file: its header promises {expected:,} bytes, the file has "
            f"{size:,}; copy it again"
        )
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as err:
        raise SourceFormatError(f"{spec}: not a readable .npy file ({err})") from None


def open_hdf5(path: str, dataset: str, options: IngestOptions) -> Source:
    import h5py

    if not os.path.exists(path):
        raise SourceNotFoundError(f"{path}: no such file; check the path")
    try:
        f = h5py.File(path, "r")
    except OSError as err:
        raise SourceFormatError(f"{path}: not a readable HDF5 file ({err})") from None
    obj = f.get(dataset)
    if not isinstance(obj, h5py.Dataset):
        names: list[str] = []
        f.visititems(lambda n, o: names.append("/" + n) if isinstance(o, h5py.Dataset) else None)
        f.close()
        raise SourceFormatError(
            f"{path}: no dataset {dataset!r} (datasets: {', '.join(names[:10]) or 'none'})"
        )
    return ArraySource(f"{path}:{dataset}", obj, options, os.path.getsize(path), closer=f.close)

"""Every kind of input, opened the same way: CSV/TSV text (files, .gz, standard input), ``.npy``
arrays (memory-mapped, pickles refused), HDF5 datasets (``file.h5:/path``) and the recording formats
of chunkfit.ingest.formats (WFDB, EDF/BDF, MiniSEED, Parquet, WAV/FLAC).
"""

from __future__ import annotations

import gzip
import hashlib
import os
import stat
import sys
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from ..config import IngestOptions
from ..errors import SourceFormatError, SourceNotFoundError, UsageError
from .block import ParsedBlock
from .csvparse import parse_blocks
from .formats import open_recording
from .source import Source
from .textblocks import LineBlocks

TEXT_SUFFIXES = (".csv", ".tsv", ".txt", ".log", ".tab", ".dat")
HDF5_SUFFIXES = (".h5", ".hdf5", ".he5")
SUPPORTED = (
    "CSV/TSV text (.csv .tsv .txt .log, optionally .gz), .npy, HDF5 datasets (file.h5:/dataset), "
    "WFDB (.hea), EDF/BDF (.edf .bdf), MiniSEED (.mseed .miniseed .ms), Parquet (.parquet), "
    "WAV/FLAC (.wav .flac) or - for standard input"
)


class TextSource(Source):
    def __init__(
        self, name: str, stream: BinaryIO, size: int | None, options: IngestOptions, live: bool
    ) -> None:
        self.name = name
        self.size = size
        self._lines = LineBlocks(
            stream, options.block_bytes, live=live, max_wait=options.commit_every
        )
        self._stream = stream
        self.layout, self._blocks = parse_blocks(self._lines, name, options)
        self.channels = list(self.layout.channels)
        self.has_time = self.layout.time is not None
        self.has_labels = self.layout.label is not None

    @property
    def bytes_read(self) -> int:
        return self._lines.bytes_read

    @property
    def interrupted(self) -> bool:
        return self._lines.interrupted

    def when_idle(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` whenever a live standard input has been quiet for a moment."""
        self._lines.on_idle = callback

    def blocks(self) -> Iterator[ParsedBlock]:
        for block in self._blocks:
            self.rows += block.values.shape[0]
            yield block

    def sha256(self) -> str:
        return self._lines.sha256.hexdigest()


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
        names = (
            list(options.names) if options.names is not None else [f"ch{i}" for i in range(n_ch)]
        )
        if len(names) != n_ch:
            raise UsageError(f"{name}: --names gives {len(names)} name(s) for {n_ch} channel(s)")
        if options.columns is not None:
            idx = []
            for c in options.columns:
                if c in names:
                    idx.append(names.index(c))
                elif c.isdigit() and int(c) < n_ch:
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
            self._cols = idx
        else:
            self._cols = list(range(n_ch))
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
                f"{self.name}: row {first_row + row} (counted from 0), column {col} (counted from 0): "
                f"{float(source[row, col]):g} in channel {self.channels[col]!r} is beyond float32 storage "
                f"(largest magnitude {float(np.finfo(np.float32).max):.4g}); rescale the column"
            )

    def sha256(self) -> str:
        return self._hash.hexdigest()


class _GzipStream:
    """A gzip file whose damage (bad header, truncation, corrupt data) is a one-line error."""

    def __init__(self, name: str, raw: gzip.GzipFile) -> None:
        self.name = name
        self.raw = raw

    def read(self, n: int = -1) -> bytes:
        try:
            return self.raw.read(n)
        except gzip.BadGzipFile as err:
            raise SourceFormatError(
                f"{self.name}: not gzip data ({err}); if the file is plain text, remove the .gz suffix"
            ) from None
        except (EOFError, zlib.error) as err:
            # EOFError would otherwise reach click, which turns it into a bare "Aborted!".
            raise SourceFormatError(
                f"{self.name}: the gzip data is truncated or damaged ({err}); copy the file again"
            ) from None

    def close(self) -> None:
        self.raw.close()


def source_path(spec: str) -> Path:
    """The file a spec names; a WFDB record may be named without its suffix (``100`` for ``100.hea``)."""
    path = Path(spec)
    if not path.exists() and Path(spec + ".hea").is_file():
        return Path(spec + ".hea")
    return path


def split_hdf5_spec(spec: str) -> tuple[str, str] | None:
    """``file.h5:/path`` -> (file, dataset); None for anything else."""
    if ":" not in spec:
        return None
    path, _, dataset = spec.rpartition(":")
    if path.lower().endswith(HDF5_SUFFIXES):
        return path, dataset or "/"
    return None


def open_source(spec: str, options: IngestOptions) -> Source:
    """Open a source by its spec: a path, ``file.h5:/dataset``, or ``-`` for standard input."""
    if spec == "-":
        st = os.fstat(sys.stdin.fileno())
        size = st.st_size if stat.S_ISREG(st.st_mode) else None  # `< file` has a size, a pipe not
        return TextSource("<stdin>", sys.stdin.buffer, size, options, live=True)
    h5 = split_hdf5_spec(spec)
    if h5 is not None:
        return _open_hdf5(*h5, options)
    path = source_path(spec)
    if not path.exists():
        raise SourceNotFoundError(f"{spec}: no such file; check the path")
    if path.is_dir():
        raise SourceFormatError(f"{spec}: is a directory, not a source file ({SUPPORTED})")
    lower = path.name.lower()
    if lower.endswith(".npy"):
        return ArraySource(spec, _open_npy(spec, path), options, path.stat().st_size)
    text_named = lower.endswith(TEXT_SUFFIXES) or (
        lower.endswith(".gz") and lower[:-3].endswith(TEXT_SUFFIXES)
    )
    recording = open_recording(
        spec, path, options, by_content=not text_named and options.delimiter is None
    )
    if recording is not None:
        return recording
    if lower.endswith(HDF5_SUFFIXES):
        raise UsageError(f"{spec}: name the dataset inside the HDF5 file, e.g. {spec}:/signal")
    if lower.endswith(".gz") and lower[:-3].endswith(TEXT_SUFFIXES):
        stream = _GzipStream(spec, gzip.open(path, "rb"))  # noqa: SIM115 - read to the end by the source
        return TextSource(spec, stream, path.stat().st_size, options, live=False)  # type: ignore[arg-type]
    if lower.endswith(TEXT_SUFFIXES) or options.delimiter is not None:
        return TextSource(spec, open(path, "rb"), path.stat().st_size, options, live=False)
    raise SourceFormatError(
        f"{spec}: unknown format {path.suffix or '(no suffix)'!r}; chunkfit reads {SUPPORTED}"
    )


def _open_npy(spec: str, path: Path) -> np.ndarray:
    """Memory-map a .npy file after checking its header: pickles (object arrays) are never loaded."""
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
            f"{spec}: the array holds Python objects (dtype {dtype}), which load only by unpickling; "
            "chunkfit never unpickles a file: save a plain numeric array"
        )
    expected = data_at + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    size = path.stat().st_size
    if size < expected:
        raise SourceFormatError(
            f"{spec}: truncated .npy file: its header promises {expected:,} bytes, the file has {size:,}; "
            "copy it again"
        )
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as err:
        raise SourceFormatError(f"{spec}: not a readable .npy file ({err})") from None


def _open_hdf5(path: str, dataset: str, options: IngestOptions) -> Source:
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

"""Which source a spec names, opened the same way for every kind of input: CSV/TSV text (files,
.gz, standard input; ``textsource``), ``.npy`` arrays and HDF5 datasets (``file.h5:/path``;
``arrays``) and the recording formats of chunkfit.ingest.formats (WFDB, EDF/BDF, MiniSEED,
Parquet, WAV/FLAC).
"""

from __future__ import annotations

import gzip
import os
import stat
import sys
from pathlib import Path

from ..config import IngestOptions
from ..errors import SourceFormatError, SourceNotFoundError, UsageError
from .arrays import ArraySource, open_hdf5, open_npy
from .formats import open_recording
from .source import Source
from .textsource import GzipStream, TextSource

TEXT_SUFFIXES = (".csv", ".tsv", ".txt", ".log", ".tab", ".dat")
HDF5_SUFFIXES = (".h5", ".hdf5", ".he5")
SUPPORTED = (
    "CSV/TSV text (.csv .tsv .txt .log, optionally .gz), .npy, HDF5 datasets (file.h5:/dataset), "
    "WFDB (.hea), EDF/BDF (.edf .bdf), MiniSEED (.mseed .miniseed .ms), Parquet (.parquet), "
    "WAV/FLAC (.wav .flac) or - for standard input"
)


def source_path(spec: str) -> Path:
    """The file a spec names; a WFDB record may go without its suffix (``100`` for ``100.hea``)."""
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
        return open_hdf5(*h5, options)
    path = source_path(spec)
    if not path.exists():
        raise SourceNotFoundError(f"{spec}: no such file; check the path")
    if path.is_dir():
        raise SourceFormatError(f"{spec}: is a directory, not a source file ({SUPPORTED})")
    lower = path.name.lower()
    if lower.endswith(".npy"):
        return ArraySource(spec, open_npy(spec, path), options, path.stat().st_size)
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
        raw = gzip.open(path, "rb")  # noqa: SIM115 - read to the end by the source
        size = path.stat().st_size
        return TextSource(spec, GzipStream(spec, raw), size, options, live=False)  # type: ignore[arg-type]
    if lower.endswith(TEXT_SUFFIXES) or options.delimiter is not None:
        return TextSource(spec, open(path, "rb"), path.stat().st_size, options, live=False)
    raise SourceFormatError(
        f"{spec}: unknown format {path.suffix or '(no suffix)'!r}; chunkfit reads {SUPPORTED}"
    )

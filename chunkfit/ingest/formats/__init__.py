"""Recording formats, each in a module of its own, its library imported only when it is read.

| format    | module    | recognised by                                   | extra        |
|-----------|-----------|-------------------------------------------------|--------------|
| WFDB      | wfdbrec   | ``.hea`` (or a ``.dat`` beside its ``.hea``)     | ``[wfdb]``   |
| EDF/BDF   | edf       | ``.edf`` ``.bdf``, or the header's first bytes  | ``[edf]``    |
| MiniSEED  | mseed     | ``.mseed`` ``.miniseed`` ``.ms``, or a record   | ``[mseed]``  |
| Parquet   | parquet   | ``.parquet`` ``.pq``, or ``PAR1``               | (pyarrow)    |
| WAV/FLAC  | audio     | ``.wav`` ``.flac``, or ``RIFF....WAVE``/``fLaC``| ``[audio]``  |
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ...config import IngestOptions
    from ..source import Source


@dataclasses.dataclass(frozen=True)
class Format:
    name: str
    suffixes: tuple[str, ...]
    module: str  # chunkfit.ingest.formats.<module> has ``open_source(spec, path, options)``


FORMATS = (
    Format("WFDB", (".hea",), "wfdbrec"),
    Format("EDF/BDF", (".edf", ".bdf"), "edf"),
    Format("MiniSEED", (".mseed", ".miniseed", ".ms"), "mseed"),
    Format("Parquet", (".parquet", ".pq"), "parquet"),
    Format("WAV/FLAC", (".wav", ".flac"), "audio"),
)


def sniff(path: Path) -> Format | None:
    """The format of a file whose suffix says nothing, from its first bytes."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError:
        return None
    by_name = {f.module: f for f in FORMATS}
    if head[:8] == b"0       " or head[:8] == b"\xffBIOSEMI":
        return by_name["edf"]
    if head[:4] == b"PAR1":
        return by_name["parquet"]
    if (head[:4] == b"RIFF" and head[8:12] == b"WAVE") or head[:4] == b"fLaC":
        return by_name["audio"]
    if head[:3] == b"MS\x03" or (
        len(head) >= 20
        and head[:6].strip(b" 0123456789") == b""
        and head[:6].strip() != b""
        and head[6:7] in b"DRQM"
        and head[7:8] in b" \x00"
    ):
        return by_name["mseed"]
    return None


def find_format(path: Path, *, by_content: bool) -> Format | None:
    """The format named by the file's suffix, else (``by_content``) by its first bytes."""
    lower = path.name.lower()
    for fmt in FORMATS:
        if lower.endswith(fmt.suffixes):
            return fmt
    if lower.endswith(".dat") and path.with_suffix(".hea").is_file():
        return FORMATS[0]  # a WFDB signal file named instead of its header
    return sniff(path) if by_content and path.is_file() else None


def open_recording(
    spec: str, path: Path, options: IngestOptions, *, by_content: bool = True
) -> Source | None:
    """A Source for a recording format, or None when ``path`` is none of them."""
    fmt = find_format(path, by_content=by_content)
    if fmt is None:
        return None
    module = importlib.import_module(f"{__name__}.{fmt.module}")
    return module.open_source(spec, path, options)


def in_time_order(specs: Sequence[str]) -> list[str]:
    """Several MiniSEED files in the order of their first record's start; other lists as given."""
    paths = [Path(s) for s in specs]
    if len(specs) < 2 or not all(
        p.is_file() and find_format(p, by_content=True) == FORMATS[2] for p in paths
    ):
        return list(specs)
    from . import mseed

    starts = [mseed.first_start(s, p) for s, p in zip(specs, paths, strict=True)]
    return [s for _, _, s in sorted(zip(starts, range(len(specs)), specs, strict=True))]


_TEXT = {".csv": "CSV", ".tsv": "TSV", ".txt": "text", ".npy": ".npy", ".log": "text"}


def recording_kind(path: str | os.PathLike[str]) -> str | None:
    """ "a MiniSEED recording" where ``path`` is a file chunkfit reads as a source (by its suffix
    or first bytes), else None: for the message when one is given where a store goes."""
    p = Path(path)
    if not p.is_file() or p.name.lower().endswith((".h5", ".hdf5")):
        return None
    fmt = find_format(p, by_content=True)
    if fmt is not None:
        return f"a {fmt.name} recording"
    name = p.name.lower().removesuffix(".gz")
    kind = next((k for s, k in _TEXT.items() if name.endswith(s)), None)
    return f"a {kind} file" if kind is not None else None

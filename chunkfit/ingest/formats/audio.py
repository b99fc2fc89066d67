"""WAV and FLAC, read in blocks of frames by libsndfile (``soundfile``, extra ``[audio]``).

Channels are the file's (``ch0``, ``ch1``, ... or ``--names``) at the file's rate; one file is one
segment. Integer PCM is stored as the file's own sample values, not libsndfile's [-1, 1) scaling:
signed 8- and 16-bit files as the integers -128..127 and -32768..32767, unsigned 8-bit WAV as its
bytes 0..255 (libsndfile shifts them to signed; the shift is undone), 24-bit exactly (below 2**24),
32-bit rounded to float32. Float files keep their
values; other encodings (u-law, A-law, ADPCM, ...) are decoded by libsndfile to [-1, 1).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ...config import IngestOptions
from ...errors import SourceFormatError, UsageError
from ..block import ParsedBlock
from .base import RecordingSource, refuse_text_options, require

# Bits to shift libsndfile's left-justified int32 samples right to get the file's integers.
INTEGER_SHIFT = {"PCM_S8": 24, "PCM_U8": 24, "PCM_16": 16, "PCM_24": 8, "PCM_32": 0}
FLOAT_SUBTYPES = ("FLOAT", "DOUBLE")


def open_source(spec: str, path: Path, options: IngestOptions) -> AudioSource:
    sf = require("soundfile", "audio", spec, "WAV/FLAC files")
    refuse_text_options(spec, "WAV/FLAC", options)
    if options.annotations is not None:
        raise UsageError(
            f"{spec}: --annotations applies to WFDB and EDF+ files; WAV/FLAC files carry none"
        )
    _check_wav_length(spec, path)
    try:
        f = sf.SoundFile(str(path))
    except (sf.SoundFileError, RuntimeError) as err:
        raise SourceFormatError(
            f"{spec}: not a readable WAV/FLAC file ({_reason(err)}); copy it again"
        ) from None
    try:
        return AudioSource(spec, path, options, f)
    except BaseException:
        f.close()
        raise


def _reason(err: BaseException) -> str:
    return " ".join(str(err).split()).removeprefix("Error : ") or type(err).__name__


def _check_wav_length(spec: str, path: Path) -> None:
    """Refuse a WAV whose data chunk promises more bytes than the file holds (libsndfile would
    silently read fewer frames)."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(12)
        if head[:4] != b"RIFF" or head[8:12] != b"WAVE":
            return
        block_align = None
        while True:
            chunk = f.read(8)
            if len(chunk) < 8:
                return
            cid, length = chunk[:4], struct.unpack("<I", chunk[4:])[0]
            if cid == b"fmt ":
                fmt = f.read(min(length, 16))
                if len(fmt) >= 14:
                    block_align = struct.unpack("<H", fmt[12:14])[0]
                f.seek(length - len(fmt) + (length & 1), 1)
                continue
            if cid == b"data":
                have = size - f.tell()
                if length in (0, 0xFFFFFFFF) or length <= have or not block_align:
                    return  # a size left open by a streaming writer: libsndfile reads to the end
                raise SourceFormatError(
                    f"{spec}: truncated WAV file: its header promises {length // block_align:,} "
                    f"frames ({length:,} bytes of data), the file holds {have // block_align:,}; "
                    "copy it again"
                )
            f.seek(length + (length & 1), 1)


class AudioSource(RecordingSource):
    """One WAV/FLAC file read frame block by frame block."""

    format = "WAV/FLAC"

    def __init__(self, spec: str, path: Path, options: IngestOptions, f: object) -> None:
        self._file = f
        n_ch, frames = int(f.channels), int(f.frames)  # type: ignore[attr-defined]
        names = (
            list(options.names) if options.names is not None else [f"ch{i}" for i in range(n_ch)]
        )
        if len(names) != n_ch:
            raise UsageError(f"{spec}: --names gives {len(names)} name(s) for {n_ch} channel(s)")
        if frames <= 0:
            raise SourceFormatError(f"{spec}: empty source: the audio file has no frames")
        self.subtype = str(f.subtype)  # type: ignore[attr-defined]
        rate = float(f.samplerate)  # type: ignore[attr-defined]
        super().__init__(spec, [path], options, names, frames, rate)

    def _read(self, a: int, b: int) -> np.ndarray:
        import soundfile as sf

        f = self._file
        shift = INTEGER_SHIFT.get(self.subtype)
        try:
            f.seek(a)  # type: ignore[attr-defined]
            if shift is not None:
                raw = f.read(b - a, dtype="int32", always_2d=True)  # type: ignore[attr-defined]
                data = (raw >> shift).astype(np.float32) if shift else raw.astype(np.float32)
                if self.subtype == "PCM_U8":
                    data += 128.0  # the file's bytes, which libsndfile read as value - 128
            else:
                dtype = "float64" if self.subtype == "DOUBLE" else "float32"
                data = f.read(b - a, dtype=dtype, always_2d=True)  # type: ignore[attr-defined]
        except (sf.SoundFileError, RuntimeError) as err:
            raise SourceFormatError(
                f"{self.name}: damaged audio data at frames [{a:,}, {b:,}) ({_reason(err)}); copy "
                "the file again"
            ) from None
        if data.shape[0] != b - a:
            raise SourceFormatError(
                f"{self.name}: truncated audio file: its header promises {self.n_rows:,} frames, "
                f"the data ends after {a + data.shape[0]:,}; copy it again"
            )
        if data.dtype == np.float64:
            with np.errstate(over="ignore"):
                cast = data.astype(np.float32)
            over = np.isinf(cast) & np.isfinite(data)
            if over.any():
                row, col = (int(v) for v in np.argwhere(over)[0])
                raise SourceFormatError(
                    f"{self.name}: frame {a + row} (counted from 0), channel {col}: "
                    f"{float(data[row, col]):g} is beyond float32 storage (largest magnitude "
                    f"{float(np.finfo(np.float32).max):.4g}); rescale it"
                )
            data = cast
        return data

    def blocks(self) -> Iterator[ParsedBlock]:
        try:
            yield from super().blocks()
        finally:
            self._file.close()  # type: ignore[attr-defined]

"""WAV and FLAC sources: files written by soundfile, read back through ingest and the CLI."""

from __future__ import annotations

import re
import wave
from pathlib import Path

import numpy as np
import pytest
from support import error_line, run_cli, siblings

import chunkfit
from chunkfit import IngestOptions
from chunkfit.errors import IncompatibleError, SourceFormatError, UsageError
from chunkfit.ingest import ingest

sf = pytest.importorskip("soundfile")

RATE = 8_000


def samples(bits: int, n: int = 3_000, channels: int = 2) -> np.ndarray:
    """Integer samples spanning the full range of ``bits``-bit PCM, as int32."""
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    ramp = np.linspace(lo, hi, n * channels).round().astype(np.int64)
    return ramp.reshape(n, channels).astype(np.int32)


def write_audio(path: Path, data: np.ndarray, subtype: str) -> Path:
    """Write integer samples of the subtype's width exactly (left-justified in int32, for
    libsndfile)."""
    shift = {"PCM_S8": 24, "PCM_U8": 24, "PCM_16": 16, "PCM_24": 8, "PCM_32": 0}.get(subtype)
    frames = data if shift is None else (data.astype(np.int64) << shift).astype(np.int32)
    sf.write(str(path), frames, RATE, subtype=subtype)
    return path


def read_store(path: Path) -> tuple[list[str], float | None, np.ndarray, list[list[int]]]:
    with chunkfit.open_store(path) as s:
        return s.channels, s.sample_rate, s.read(0, s.n_samples), s.segments.tolist()


INTEGER_FILES = [
    ("wav-u8", "a.wav", "PCM_U8", 8),
    ("wav-16", "a.wav", "PCM_16", 16),
    ("wav-24", "a.wav", "PCM_24", 24),
    ("flac-8", "a.flac", "PCM_S8", 8),
    ("flac-16", "a.flac", "PCM_16", 16),
    ("flac-24", "a.flac", "PCM_24", 24),
]


@pytest.mark.parametrize(
    ("name", "subtype", "bits"), [c[1:] for c in INTEGER_FILES], ids=[c[0] for c in INTEGER_FILES]
)
def test_integer_pcm_is_stored_as_the_files_own_sample_values(
    tmp_path: Path, store_path: Path, name: str, subtype: str, bits: int
) -> None:
    data = samples(bits)
    src = write_audio(tmp_path / name, data, subtype)
    ingest(store_path, [str(src)], IngestOptions(block_bytes=4_000))
    channels, rate, signal, segments = read_store(store_path)
    assert (channels, rate, segments) == (["ch0", "ch1"], float(RATE), [[0, 3_000]])
    unsigned = 128 if subtype == "PCM_U8" else 0  # an unsigned file's own values are its bytes
    np.testing.assert_array_equal(signal, data.astype(np.float32) + unsigned)


def test_unsigned_8_bit_wav_is_stored_as_its_bytes(tmp_path: Path, store_path: Path) -> None:
    raw = bytes([0, 1, 127, 128, 129, 254, 255] * 30)
    with wave.open(str(tmp_path / "u8.wav"), "wb") as w:  # the standard library's own writer
        w.setnchannels(1)
        w.setsampwidth(1)
        w.setframerate(RATE)
        w.writeframes(raw)
    ingest(store_path, [str(tmp_path / "u8.wav")], IngestOptions())
    _, _, signal, _ = read_store(store_path)
    np.testing.assert_array_equal(signal[:, 0], np.frombuffer(raw, np.uint8).astype(np.float32))


def test_float_wav_keeps_its_values(tmp_path: Path, store_path: Path) -> None:
    data = (np.sin(np.arange(5_000) / 17.0) * 0.9).astype(np.float32).reshape(-1, 1)
    src = write_audio(tmp_path / "f.wav", data, "FLOAT")
    ingest(store_path, [str(src)], IngestOptions(names=("mic",)))
    channels, rate, signal, _ = read_store(store_path)
    assert (channels, rate) == (["mic"], float(RATE))
    np.testing.assert_array_equal(signal, data)


def test_names_of_the_wrong_count_are_refused(tmp_path: Path, store_path: Path) -> None:
    src = write_audio(tmp_path / "a.wav", samples(16), "PCM_16")
    with pytest.raises(
        UsageError, match=re.escape(f"{src}: --names gives 1 name(s) for 2 channel(s)")
    ):
        ingest(store_path, [str(src)], IngestOptions(names=("left",)))


def test_a_wav_cut_short_is_refused_naming_frames_promised_and_held(
    tmp_path: Path, store_path: Path
) -> None:
    src = write_audio(tmp_path / "cut.wav", samples(16), "PCM_16")
    src.write_bytes(src.read_bytes()[: 44 + 4 * 1_000])
    with pytest.raises(
        SourceFormatError,
        match=re.escape(
            f"{src}: truncated WAV file: its header promises 3,000 frames (12,000 bytes of data), "
            "the file holds 1,000; copy it again"
        ),
    ):
        ingest(store_path, [str(src)], IngestOptions())
    assert siblings(store_path) == ["cut.wav"]


def test_a_damaged_wav_header_is_refused_by_the_cli_with_one_line(tmp_path: Path) -> None:
    src = write_audio(tmp_path / "bad.wav", samples(16), "PCM_16")
    raw = src.read_bytes()
    src.write_bytes(raw[:12] + b"\x00" * 24 + raw[36:])  # the fmt chunk and the data marker wiped
    result = run_cli("ingest", "out.zarr", "bad.wav", cwd=tmp_path)
    assert error_line(result).startswith("chunkfit: error: bad.wav: not a readable WAV/FLAC file (")
    assert siblings(tmp_path / "out.zarr") == ["bad.wav"]


def test_a_truncated_flac_is_refused_with_one_line(tmp_path: Path) -> None:
    src = write_audio(tmp_path / "cut.flac", samples(16, n=20_000), "PCM_16")
    src.write_bytes(src.read_bytes()[: src.stat().st_size // 2])
    result = run_cli("ingest", "out.h5", "cut.flac", cwd=tmp_path)
    assert error_line(result) == (
        "chunkfit: error: cut.flac: damaged audio data at frames [0, 20,000) (flac decoder lost "
        "sync.); copy the file again"
    )
    assert siblings(tmp_path / "out.h5") == ["cut.flac"]


@pytest.mark.parametrize(
    ("name", "subtype"), [("recording", "PCM_16"), ("take", "FLAC")], ids=["wav", "flac"]
)
def test_a_file_without_its_suffix_is_recognised_by_its_header(
    tmp_path: Path, name: str, subtype: str
) -> None:
    data = samples(16, n=500)
    fmt = "FLAC" if subtype == "FLAC" else "WAV"
    sf.write(
        str(tmp_path / name), (data << 16).astype(np.int32), RATE, subtype="PCM_16", format=fmt
    )
    result = run_cli("ingest", "out.zarr", name, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    channels, rate, signal, _ = read_store(tmp_path / "out.zarr")
    assert (channels, rate) == (["ch0", "ch1"], float(RATE))
    np.testing.assert_array_equal(signal, data)


def test_files_at_different_rates_are_refused(tmp_path: Path, store_path: Path) -> None:
    first = write_audio(tmp_path / "a.wav", samples(16), "PCM_16")
    second = tmp_path / "b.flac"
    sf.write(str(second), np.zeros((100, 2), dtype=np.int32), 2 * RATE, subtype="PCM_16")
    with pytest.raises(
        IncompatibleError,
        match=re.escape(
            f"{second}: runs at 16000 Hz, the earlier sources at 8000 Hz; resample it or ingest it "
            "into a separate store"
        ),
    ):
        ingest(store_path, [str(first), str(second)], IngestOptions())
    assert siblings(store_path) == ["a.wav", "b.flac"]

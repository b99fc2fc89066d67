"""Each recording format without its library: the CLI names the extra that installs it."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import pytest
from support import error_line, run_without, siblings

HINT = "(or chunkfit[formats] for every format)"


class Missing(NamedTuple):
    module: str  # chunkfit/ingest/formats/<module>.py
    library: str
    extra: str
    file: str
    content: bytes
    what: str  # the "reading ... needs" words


def _mseed_record() -> bytes:
    pymseed = pytest.importorskip("pymseed")
    msr = pymseed.MS3Record(reclen=512, encoding=pymseed.DataEncoding.STEIM2)
    msr.sourceid, msr.starttime, msr.samprate = "FDSN:XX_STA__H_H_Z", 0, 100.0
    return b"".join(msr.generate(data_samples=list(range(100)), sample_type="i"))


CASES = [
    Missing("mseed", "pymseed", "mseed", "quake.mseed", b"", "MiniSEED files"),
    Missing(
        "audio",
        "soundfile",
        "audio",
        "voice.wav",
        b"RIFF\x24\x00\x00\x00WAVEfmt ",
        "WAV/FLAC files",
    ),
    Missing("audio", "soundfile", "audio", "voice.flac", b"fLaC\x00\x00\x00\x22", "WAV/FLAC files"),
    Missing("edf", "pyedflib", "edf", "sleep.edf", b"0       " + b" " * 248, "EDF/BDF files"),
    Missing(
        "wfdbrec",
        "wfdb",
        "wfdb",
        "100.hea",
        b"100 1 360 650000\n100.dat 212 200 11 1024 995 -22131 0 MLII\n",
        "WFDB records",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.file for c in CASES])
def test_a_format_without_its_library_names_the_extra_to_install(
    tmp_path: Path, case: Missing
) -> None:
    content = _mseed_record() if case.module == "mseed" else case.content
    (tmp_path / case.file).write_bytes(content)
    result = run_without(case.library, ["ingest", "out.zarr", case.file], tmp_path)
    line = error_line(result)
    assert (result.returncode, line) == (
        2,
        (
            f"chunkfit: error: {case.file}: reading {case.what} needs the {case.library} package; "
            f"install it with pip install 'chunkfit[{case.extra}]' {HINT}"
        ),
    )
    assert siblings(tmp_path / "out.zarr") == [case.file]

#!/usr/bin/env python3
"""Regenerate ``ecg208.csv`` from the ECG excerpt bundled in the scipy 1.13.1 wheel.

SciPy up to the 1.14 series ships ``scipy/misc/ecg.dat``: an ``.npz`` archive
holding one ``uint16`` array ``ecg`` with 108,000 samples (5 minutes at 360 Hz)
of lead MLII from record 208 of the MIT-BIH Arrhythmia Database.  This script
only reads that data file out of the wheel (a zip archive); it does not import
or install scipy, and scipy is not a dependency of the project.

Usage::

    python data/make_ecg.py                 # pip-downloads the wheel to a temp dir
    python data/make_ecg.py WHEEL.whl       # use an already downloaded wheel

The output is written next to this script as ``ecg208.csv`` (override with
``--out``).  See ``README.md`` in this directory for provenance and licence.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import io
import os
import subprocess
import sys
import tempfile
import zipfile

import numpy as np

SCIPY_VERSION = "1.13.1"
MEMBER = "scipy/misc/ecg.dat"
# sha256 of the member above (identical in scipy 1.13.1 and 1.14.1, and the
# value listed for ``ecg.dat`` in the ``scipy.datasets`` registry).
MEMBER_SHA256 = "f20ad3365fb9b7f845d0e5c48b6fe67081377ee466c3a220b7f69f35c8958baf"
FS_HZ = 360
N_SAMPLES = 108_000
ADC_ZERO = 1024  # raw value corresponding to 0 mV
ADC_GAIN = 200  # raw units per mV
HERE = os.path.dirname(os.path.abspath(__file__))


def download_wheel(dest: str) -> str:
    """Download the scipy wheel (no dependencies) into ``dest``; return its path.

    One fixed wheel (CPython 3.11, manylinux x86_64) is requested whatever the
    host is, since scipy 1.13.1 has no wheels for newer Pythons; only its data
    file is read, and every wheel of that release carries the same bytes.
    """
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--platform",
        "manylinux2014_x86_64",
        "--python-version",
        "3.11",
        "--implementation",
        "cp",
        "-d",
        dest,
        f"scipy=={SCIPY_VERSION}",
    ]
    subprocess.run(cmd, check=True)
    wheels = glob.glob(os.path.join(dest, f"scipy-{SCIPY_VERSION}-*.whl"))
    if not wheels:
        raise FileNotFoundError(f"pip did not produce a scipy {SCIPY_VERSION} wheel")
    return wheels[0]


def read_raw_ecg(wheel: str) -> np.ndarray:
    """Return the raw ``uint16`` ECG samples stored in ``wheel``'s ``ecg.dat``."""
    with zipfile.ZipFile(wheel) as zf:
        blob = zf.read(MEMBER)
    digest = hashlib.sha256(blob).hexdigest()
    if digest != MEMBER_SHA256:
        raise ValueError(f"{MEMBER} has sha256 {digest}, expected {MEMBER_SHA256}")
    with np.load(io.BytesIO(blob)) as npz:
        raw = np.asarray(npz["ecg"])
    if raw.dtype != np.uint16 or raw.shape != (N_SAMPLES,):
        raise ValueError(f"unexpected array: dtype={raw.dtype}, shape={raw.shape}")
    return raw


def to_millivolts(raw: np.ndarray) -> np.ndarray:
    """Convert raw ADC units to millivolts: ``(raw - 1024) / 200``."""
    return (raw.astype(np.int64) - ADC_ZERO) / ADC_GAIN


def write_csv(mv: np.ndarray, path: str) -> None:
    """Write ``time_s,mlii_mv`` rows; values are multiples of 0.005 so 3 decimals are exact."""
    time_s = np.arange(mv.size) / FS_HZ
    with open(path, "w", encoding="ascii", newline="\n") as fh:
        fh.write("time_s,mlii_mv\n")
        np.savetxt(fh, np.column_stack([time_s, mv]), fmt=["%.6f", "%.3f"], delimiter=",")


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wheel", nargs="?", help=f"path to a scipy {SCIPY_VERSION} wheel")
    parser.add_argument("--out", default=os.path.join(HERE, "ecg208.csv"), help="output CSV")
    args = parser.parse_args(argv)

    if args.wheel:
        raw = read_raw_ecg(args.wheel)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            raw = read_raw_ecg(download_wheel(tmp))
    mv = to_millivolts(raw)
    write_csv(mv, args.out)
    print(
        f"wrote {mv.size} samples ({mv.size / FS_HZ:.0f} s at {FS_HZ} Hz), "
        f"mean {mv.mean():.5f} mV, std {mv.std():.5f} mV -> {os.path.basename(args.out)}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

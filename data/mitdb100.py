#!/usr/bin/env python3
"""Turn MIT-BIH Arrhythmia Database record 100 (``data/mitdb100/``) into a signal and event markers.

The record is kept as PhysioNet distributes it (WFDB format): ``100.hea`` (header), ``100.dat``
(two channels, MLII and V5, 360 Hz, 11-bit samples packed in WFDB format 212) and ``100.atr``
(the cardiologists' beat annotations, MIT format). This script reads all three with numpy and the
standard library only, checks the header's per-channel checksums against the samples, and writes

- ``OUT/mitdb100.npy``: int16 array (650000, 2), the samples in raw ADC units (200 units per mV,
  1024 = 0 mV), as a sensor log arrives;
- ``OUT/mitdb100_events.txt``: the sample index of every beat whose annotation is in ``--beats``
  (default ``A,V``: the 33 atrial and the 1 ventricular premature beat of the record).

Usage::

    python data/mitdb100.py OUT [--beats A,V]
    chunkfit ingest m100.zarr OUT/mitdb100.npy --rate 360 --names MLII,V5 \\
        --events OUT/mitdb100_events.txt

See ``README.md`` in this directory for provenance and licence.
"""

from __future__ import annotations

import argparse
import collections
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent / "mitdb100"
# MIT annotation codes 1..41 (WFDB's ecgcodes.h); only the beat codes matter here.
CODES = {
    1: "N",
    2: "L",
    3: "R",
    4: "a",
    5: "V",
    6: "F",
    7: "J",
    8: "A",
    9: "S",
    10: "E",
    11: "j",
    12: "/",
    13: "Q",
    14: "~",
    16: "|",
    18: "s",
    19: "T",
    20: "*",
    21: "D",
    22: '"',
    23: "=",
    24: "p",
    25: "B",
    26: "^",
    27: "t",
    28: "+",
    29: "u",
    30: "?",
    31: "!",
    32: "[",
    33: "]",
    34: "e",
    35: "n",
    36: "@",
    37: "x",
    38: "f",
    39: "(",
    40: ")",
    41: "r",
}
SKIP, NUM, SUB, CHN, AUX = 59, 60, 61, 62, 63


def read_header(path: Path) -> tuple[int, float, int, list[dict[str, object]]]:
    """(channels, rate, samples, [{file, format, gain, baseline, first, checksum, name}, ...])."""
    lines = [
        ln.split() for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")
    ]
    _, n_sig, rate, n_samp = lines[0][:4]
    signals = [
        {
            "file": f,
            "format": fmt,
            "gain": float(g),
            "baseline": int(base),
            "first": int(first),
            "checksum": int(check),
            "name": name,
        }
        for f, fmt, g, _bits, base, first, check, _block, name in (
            ln[:9] for ln in lines[1 : 1 + int(n_sig)]
        )
    ]
    return int(n_sig), float(rate), int(n_samp), signals


def read_212(path: Path, n_sig: int, n_samp: int) -> np.ndarray:
    """Format 212: two 12-bit two's-complement samples in each three bytes, channels interleaved."""
    raw = np.fromfile(path, dtype=np.uint8)
    triples = raw[: raw.size // 3 * 3].reshape(-1, 3).astype(np.int16)
    first = triples[:, 0] | ((triples[:, 1] & 0x0F) << 8)
    second = triples[:, 2] | ((triples[:, 1] & 0xF0) << 4)
    flat = np.stack([first, second], axis=1).reshape(-1)
    flat = np.where(flat >= 2048, flat - 4096, flat).astype(np.int16)
    if flat.size < n_sig * n_samp:
        raise ValueError(f"{path}: {flat.size // n_sig} frames, the header says {n_samp}")
    return flat[: n_sig * n_samp].reshape(n_samp, n_sig)


def read_annotations(path: Path) -> list[tuple[int, str]]:
    """(sample, code) of every annotation in an MIT-format annotation file."""
    words = np.fromfile(path, dtype="<u2").astype(np.int64)
    out: list[tuple[int, str]] = []
    t = i = 0
    while i < words.size:
        code, value = int(words[i]) >> 10, int(words[i]) & 0x3FF
        i += 1
        if code == 0 and value == 0:
            break
        if code == SKIP:  # a 32-bit interval follows, high 16 bits first
            t += (int(words[i]) << 16) | int(words[i + 1])
            i += 2
        elif code in (NUM, SUB, CHN):
            pass
        elif code == AUX:  # ``value`` bytes of text follow, padded to a whole word
            i += (value + 1) // 2
        else:
            t += value
            out.append((t, CODES.get(code, str(code))))
    return out


def load(
    beats: str = "A,V", folder: Path = HERE
) -> tuple[np.ndarray, np.ndarray, float, list[str]]:
    """(samples (n, 2) int16, event sample indices, rate, channel names), checksums verified."""
    n_sig, rate, n_samp, signals = read_header(folder / "100.hea")
    samples = read_212(folder / str(signals[0]["file"]), n_sig, n_samp)
    for k, sig in enumerate(signals):
        total = int(samples[:, k].astype(np.int64).sum())
        checksum = (total + 2**15) % 2**16 - 2**15  # the low 16 bits, as a signed number
        if checksum != sig["checksum"] or samples[0, k] != sig["first"]:
            raise ValueError(
                f"100.dat channel {sig['name']}: checksum {checksum} and first sample "
                f"{samples[0, k]}, the header says {sig['checksum']} and {sig['first']}"
            )
    keep = set(beats.split(","))
    events = np.array(
        [t for t, code in read_annotations(folder / "100.atr") if code in keep], dtype=np.int64
    )
    return samples, events, rate, [str(s["name"]) for s in signals]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument(
        "--beats", default="A,V", help="Annotation codes that become events, comma-separated"
    )
    args = ap.parse_args()
    samples, events, rate, names = load(args.beats)
    args.out.mkdir(parents=True, exist_ok=True)
    np.save(args.out / "mitdb100.npy", samples)
    (args.out / "mitdb100_events.txt").write_text("".join(f"{e}\n" for e in events.tolist()))
    counts = collections.Counter(code for _, code in read_annotations(HERE / "100.atr"))
    print(
        f"{samples.shape[0]:,} samples x {samples.shape[1]} ({', '.join(names)}) at {rate:g} Hz; "
        f"{events.size} events ({args.beats}); annotations {dict(counts)}"
    )


if __name__ == "__main__":
    main()

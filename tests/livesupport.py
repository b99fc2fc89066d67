"""A live stream for the tests: a writer process piping CSV rows into ``chunkfit ingest STORE -``,
held at gates the test opens, and the conditions the tests wait on."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import zarr
from support import cli_command, cli_env, run_cli

import chunkfit

RATE = 100.0
GAP_SECONDS = 5.0  # the time column jumps this far before a phase that starts a new recording

# argv: rows of each phase ("300,200"), the gate folder, "gap" (phase 2 starts after a time gap) or
# "-", "hold" (keep the pipe open after the last phase until killed) or "end", and "iso" (times
# as ISO 8601 UTC from 2024-05-01 noon) or "seconds". Before phase
# k > 0 it waits for the file gate/go-k; after each phase, once the pipe is drained (the ingest has
# read every byte), it creates gate/drained-k. The whole stream is also written to gate/stream.csv.
WRITER = textwrap.dedent(
    """
    import fcntl, os, struct, sys, termios, time
    import numpy as np
    phases = [int(n) for n in sys.argv[1].split(",")]
    gate, gap, hold = sys.argv[2], sys.argv[3] == "gap", sys.argv[4] == "hold"
    iso = sys.argv[5] == "iso"
    n = sum(phases)
    rng = np.random.default_rng(5)
    x = np.sin(np.arange(n)) + rng.normal(0.0, 0.2, n)
    x[::29] += 0.5  # the synthetic problem's bumps, often enough for detections in every phase
    t = np.arange(n) / 100.0
    if gap:
        t[phases[0]:] += 5.0
    stamps = [repr(float(a)) for a in t]
    if iso:
        noon = np.datetime64("2024-05-01T12:00:00", "us")
        stamps = [str(noon + np.timedelta64(round(a * 1e6), "us")) + "Z" for a in t]
    lines = ["t,x"] + [f"{a},{float(b)!r}" for a, b in zip(stamps, x)]
    with open(os.path.join(gate, "stream.csv"), "w") as f:
        f.write("\\n".join(lines) + "\\n")
    out = sys.stdout
    out.write(lines[0] + "\\n")
    at = 1
    for k, rows in enumerate(phases):
        if k:
            while not os.path.exists(os.path.join(gate, f"go-{k}")):
                time.sleep(0.02)
        for i in range(0, rows, 10):  # 10 rows every 10 ms: a fixed rate of 1,000 rows a second
            out.write("\\n".join(lines[at + i : at + min(i + 10, rows)]) + "\\n")
            out.flush()
            time.sleep(0.01)
        at += rows
        while struct.unpack("i", fcntl.ioctl(1, termios.FIONREAD, b"\\0" * 4))[0] > 0:
            time.sleep(0.01)
        open(os.path.join(gate, f"drained-{k}"), "w").close()
    while hold:
        time.sleep(1)
    """
)


class Stream:
    """A writer process piping CSV rows into ``chunkfit ingest STORE -`` (both real processes)."""

    def __init__(
        self,
        tmp: Path,
        store: Path | str,
        phases: list[int],
        *ingest_args: str,
        gap: bool = False,
        hold: bool = False,
        iso: bool = False,
    ) -> None:
        self.gate = tmp / "gate"
        self.gate.mkdir()
        self.phases = phases
        self.writer = subprocess.Popen(
            [
                sys.executable,
                "-c",
                WRITER,
                ",".join(map(str, phases)),
                str(self.gate),
                "gap" if gap else "-",
                "hold" if hold else "end",
                "iso" if iso else "seconds",
            ],
            stdout=subprocess.PIPE,
        )
        assert self.writer.stdout is not None
        self.ingest = subprocess.Popen(
            cli_command("ingest", str(store), "-", "--time-column", "t", *ingest_args),
            cwd=tmp,
            env=cli_env(),
            stdin=self.writer.stdout,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.writer.stdout.close()  # only the ingest holds the read end now

    def go(self, phase: int) -> None:
        (self.gate / f"go-{phase}").touch()

    def drained(self, phase: int) -> bool:
        return (self.gate / f"drained-{phase}").exists()

    def rows(self, upto: int | None = None) -> int:
        return sum(self.phases[: upto if upto is not None else len(self.phases)])

    def finish(self) -> tuple[int, str, str]:
        out, err = self.ingest.communicate(timeout=120)
        self.writer.wait(timeout=120)
        return self.ingest.returncode, out.decode(), err.decode()

    def stop(self) -> None:
        for proc in (self.ingest, self.writer):
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def wait_for(
    condition: Callable[[], bool], *procs: subprocess.Popen[bytes], seconds: float = 120
) -> None:
    """Wait until ``condition()`` holds; fail if it does not within ``seconds`` or a process died
    first."""
    deadline = time.monotonic() + seconds
    while not condition():
        for p in procs:
            if p.poll() is not None:
                err = p.stderr.read().decode() if p.stderr is not None else ""
                raise AssertionError(
                    f"process {p.args[:4]} ended with {p.returncode} while waiting: {err}"
                )
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


def committed(store: Path | str) -> int:
    """Samples a reader sees in the store now (0 while it does not exist or a commit is under
    way)."""
    try:
        with chunkfit.open_store(store) as s:
            return s.n_samples
    except (chunkfit.errors.StoreNotFoundError, chunkfit.errors.StoreBusyError):
        return 0


def stream_values(gate: Path) -> np.ndarray:
    return np.loadtxt(gate / "stream.csv", delimiter=",", skiprows=1, dtype=np.float64)[
        :, 1
    ].astype(np.float32)


def stream_ended_by_ctrl_c(tmp: Path, store: Path | str, streams: list[Stream]) -> Stream:
    """A stream of 250 rows whose writer then holds the pipe open, with no commit on time: Ctrl-C
    once the ingest has read them all (none committed yet) ends it cleanly, saying so."""
    stream = Stream(tmp, store, [250], "--commit-every", "600", hold=True)
    streams.append(stream)
    wait_for(lambda: stream.drained(0), stream.ingest)
    assert committed(store) == 0
    stream.ingest.send_signal(signal.SIGINT)
    out, err = stream.ingest.communicate(timeout=120)
    assert (stream.ingest.returncode, err) == (0, b"")
    assert out.decode().rstrip().endswith("(stream ended by Ctrl-C)")
    return stream


# -- predict --follow ------------------------------------------------------------------------------


def read_scores(path: Path) -> np.ndarray:
    return np.asarray(zarr.open_group(str(path), mode="r")["scores"][:])


def detection_rows(path: Path) -> int:
    try:
        return max(0, len(path.read_text().splitlines()) - 1)
    except FileNotFoundError:
        return 0


def follow(tmp: Path, run: Path | str, store: Path | str, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        cli_command(
            "predict",
            str(run),
            str(store),
            "--follow",
            "--out",
            "follow.zarr",
            "--events-out",
            "follow.csv",
            *extra,
        ),
        cwd=tmp,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def assert_same_as_offline(tmp: Path, run: Path | str, store: Path | str, *extra: str) -> None:
    offline = run_cli(
        "predict",
        run,
        store,
        "--out",
        "offline.zarr",
        "--events-out",
        "offline.csv",
        *extra,
        cwd=tmp,
    )
    assert offline.returncode == 0, offline.stderr
    live, ref = read_scores(tmp / "follow.zarr"), read_scores(tmp / "offline.zarr")
    np.testing.assert_array_equal(
        live.view(np.uint32), ref.view(np.uint32)
    )  # bit for bit, NaNs too
    assert (tmp / "follow.csv").read_bytes() == (tmp / "offline.csv").read_bytes()
    assert dict(zarr.open_group(str(tmp / "follow.zarr"), mode="r").attrs) == dict(
        zarr.open_group(str(tmp / "offline.zarr"), mode="r").attrs
    )


def follow_beside_a_stream(
    tmp: Path, run: Path | str, store: Path | str, streams: list[Stream], iso: bool = False
) -> None:
    """A stream of 600 rows, then 400 after a time gap, committed every 0.2 s, and
    ``predict --follow`` of its store started once the first 600 are committed: detections appear
    while the writer still holds the stream open, following ends after ``--idle 8``, and its outputs
    equal an offline predict's of the final store (two segments)."""
    stream = Stream(tmp, store, [600, 400], "--commit-every", "0.2", gap=True, iso=iso)
    streams.append(stream)
    wait_for(lambda: committed(store) == 600, stream.ingest)
    threshold = ("--threshold", repr(closing_threshold(tmp, run, stream)))
    proc = follow(tmp, run, store, "--idle", "8", *threshold)
    try:
        wait_for(lambda: detection_rows(tmp / "follow.csv") > 0, proc, stream.ingest)
        assert stream.writer.poll() is None  # found while the writer still holds the stream open
        stream.go(1)
        code, _out, err = stream.finish()
        assert (code, err) == (0, "")
        out, err_f = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err_f.decode()
    assert "(followed until the store idle for 8 s)" in out.decode()
    with chunkfit.open_store(store) as s:
        assert s.segments.tolist() == [[0, 600], [600, 1000]]
    assert_same_as_offline(tmp, run, store, *threshold)


def closing_threshold(tmp: Path, run: Path | str, stream: Stream) -> float:
    """A threshold at which an event of the stream's first 600 rows is over before they end: the
    score of a window that no window of the next ``window`` reaches, from an offline predict of
    those rows (scored as ``predict --follow`` scores them: bit for bit)."""
    rows = (stream.gate / "stream.csv").read_text().splitlines()[:601]
    (tmp / "first.csv").write_text("\n".join(rows) + "\n")
    for args in (
        ("ingest", "first.zarr", "first.csv", "--time-column", "t"),
        ("predict", run, "first.zarr", "--out", "first-scores.zarr"),
    ):
        result = run_cli(*args, cwd=tmp)
        assert result.returncode == 0, result.stderr
    scores = read_scores(tmp / "first-scores.zarr")
    window = int(np.isnan(scores).sum()) + 1  # stride 1: the last window - 1 samples have none
    n = scores.size - window + 1  # windows
    for j in np.argsort(-scores[: n - window], kind="stable").tolist():
        if (scores[j + 1 : j + window + 1] < scores[j]).all():
            return float(scores[j])
    raise AssertionError("no window of the first rows scores above the next ones")

"""Helpers shared by the store and ingest tests: running the CLI for real, writing sources,
and taking snapshots of a store to prove that a failed command changed nothing.
"""

from __future__ import annotations

import os
import pty
import random
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from hypothesis import HealthCheck, settings

import chunkfit

REPO = Path(__file__).resolve().parents[1]
SUFFIX = {"zarr": ".zarr", "hdf5": ".h5"}


def examples(n: int) -> settings:
    """Hypothesis settings for tests whose examples write real files: few examples, no deadline.

    The only function-scoped fixture these tests take is the backend name, which no example changes.
    """
    return settings(
        max_examples=n,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


_PORT_DRAWS = random.Random(os.getpid())


def _ephemeral_floor() -> int:
    """The lowest port the kernel hands out for ``bind(("", 0))`` and outgoing connections."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_ports(n: int) -> list[int]:
    """``n`` distinct loopback ports, free now, for servers a test starts (TensorFlow workers,
    moto).

    Drawn below the kernel's ephemeral range: a port asked of the kernel with ``bind(0)`` and then
    closed could be handed to any outgoing connection (the S3 tests of another xdist worker make
    hundreds) before the server binds it. Seeded by the process id, so parallel test processes draw
    different ports, and drawn on from call to call, so one process does not draw the same ones
    again.
    """
    floor = _ephemeral_floor()
    ports: list[int] = []
    while len(ports) < n:
        port = _PORT_DRAWS.randrange(max(floor - 12_000, 1024), floor)
        if port in ports:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        ports.append(port)
    return ports


def cli_env() -> dict[str, str]:
    """The environment for a chunkfit subprocess: this checkout first on the import path."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    env.pop("COLUMNS", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # compile chunkfit once, not in every subprocess
    return env


# Starts chunkfit (argv: file size limit or 0, 1 to obey file modes, then ``-m chunkfit ARGS``)
# after confining this process; exec passes the limit on and recomputes capabilities. Root ignores
# read-only modes through CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH: dropping both from the bounding
# set before exec leaves the new program without them. A launcher rather than ``preexec_fn``, which
# is unsafe in a process with threads (the tests run several CLI commands from a thread pool).
CONFINE = """
import os, sys
limit, obey = int(sys.argv[1]), sys.argv[2] == "1"
if limit:
    import resource
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
if obey and os.geteuid() == 0:
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2):
        if libc.prctl(24, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")
os.execv(sys.executable, [sys.executable, *sys.argv[3:]])
"""


def cli_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "chunkfit", *args]


def run_cli(
    *args: str | os.PathLike[str],
    cwd: Path | None = None,
    stdin: Any = None,
    input: bytes | None = None,
    timeout: float = 300,
    file_size: int | None = None,
    obey_modes: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m chunkfit ARGS`` in a real subprocess and capture its output as text.

    ``file_size`` caps every file the child writes (``ulimit -f``): Python ignores SIGXFSZ, so a
    write past it fails with EFBIG, as on a full disk. ``obey_modes`` makes read-only file modes
    bind the child even when the tests run as root (see ``CONFINE``).
    """
    command = cli_command(*map(str, args))
    if file_size is not None or obey_modes:
        command = [
            sys.executable,
            "-c",
            CONFINE,
            str(file_size or 0),
            str(int(obey_modes)),
            *command[1:],
        ]
    proc = subprocess.run(
        command,
        check=False,
        cwd=cwd,
        env=cli_env(),
        stdin=subprocess.DEVNULL if stdin is None and input is None else stdin,
        input=input,
        capture_output=True,
        timeout=timeout,
    )
    return subprocess.CompletedProcess(
        proc.args, proc.returncode, proc.stdout.decode(), proc.stderr.decode()
    )


def run_without(module: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``chunkfit ARGS`` in a subprocess where ``module`` cannot be imported, as if not installed
    (``sys.modules[module] = None``)."""
    blocked = (
        f"import sys; sys.modules[{module!r}] = None; from chunkfit.cli import main; main({args!r})"
    )
    return subprocess.run(
        [sys.executable, "-c", blocked],
        check=False,
        cwd=cwd,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The single stderr line of a failed command; fails the test when there is anything else."""
    assert result.returncode != 0, f"expected a failure, got success: {result.stdout}"
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, f"expected exactly one stderr line, got {lines!r}"
    return lines[0]


def write_csv(
    path: Path,
    values: np.ndarray,
    *,
    names: Sequence[str] | None = None,
    delimiter: str = ",",
    times: Sequence[Any] | np.ndarray | None = None,
    time_name: str = "t",
    labels: Sequence[int] | None = None,
) -> Path:
    """Write channel ``values`` [rows, channels] (repr of float64: exact), optional time and
    labels."""
    columns: list[list[str]] = []
    header: list[str] = []
    if times is not None:
        header.append(time_name)
        columns.append([t if isinstance(t, str) else repr(float(t)) for t in times])
    for j in range(values.shape[1]):
        header.append(names[j] if names is not None else f"c{j}")
        columns.append([repr(float(v)) for v in values[:, j]])
    if labels is not None:
        header.append("label")
        columns.append([str(int(v)) for v in labels])
    rows = [delimiter.join(r) for r in zip(*columns, strict=True)]
    text = (
        [delimiter.join(header)]
        if names is not None or times is not None or labels is not None
        else []
    )
    path.write_text("\n".join(text + rows) + "\n")
    return path


def raw_zarr_array(store: Path, name: str) -> zarr.Array:
    """One array of a zarr store opened with zarr itself, bypassing chunkfit."""
    return zarr.open_array(str(store), path=name, mode="r")


def snapshot(path: Path) -> dict[str, bytes]:
    """Every file of a store (a zarr directory or an HDF5 file) by relative path, byte for byte."""
    if path.is_file():
        return {".": path.read_bytes()}
    out: dict[str, bytes] = {}
    for p in sorted(path.rglob("*")):
        if p.is_file():
            out[str(p.relative_to(path))] = p.read_bytes()
    return out


def contents(path: Path) -> dict[str, Any]:
    """What a store holds as read through chunkfit: arrays, segments, events, labels and
    attributes."""
    with chunkfit.open_store(path) as s:
        return {
            "signal": s.read(0, s.n_samples),
            "segments": s.segments.copy(),
            "events": s.events.copy(),
            "labels": s.read_labels(0, s.n_samples) if s.has_labels else None,
            "attrs": s.attrs,
        }


def assert_same_contents(a: dict[str, Any], b: dict[str, Any]) -> None:
    np.testing.assert_array_equal(a["signal"], b["signal"])
    np.testing.assert_array_equal(a["segments"], b["segments"])
    np.testing.assert_array_equal(a["events"], b["events"])
    if a["labels"] is None or b["labels"] is None:
        assert a["labels"] is None and b["labels"] is None
    else:
        np.testing.assert_array_equal(a["labels"], b["labels"])
    assert a["attrs"] == b["attrs"]


def siblings(path: Path) -> list[str]:
    """Names in the store's folder other than temporaries a killed writer may leave."""
    return sorted(p.name for p in path.parent.iterdir() if ".chunkfit-tmp-" not in p.name)


def make_store(
    path: Path,
    signal: np.ndarray,
    *,
    segments: Sequence[tuple[int, int]] | None = None,
    events: Sequence[int] | None = None,
    labels: np.ndarray | None = None,
    rate: float | None = 100.0,
    chunk: int = 64,
    channels: Sequence[str] | None = None,
) -> Path:
    """Write a store through the library's writer: the quick way to a store for store tests."""
    names = list(channels) if channels is not None else [f"c{j}" for j in range(signal.shape[1])]
    with chunkfit.StoreWriter(
        path,
        channels=names,
        sample_rate=rate,
        has_labels=labels is not None,
        append=False,
        chunk_samples=chunk,
    ) as w:
        w.write(signal, labels)
        for a, b in segments if segments is not None else [(0, signal.shape[0])]:
            w.add_segment(a, b)
        if events is not None:
            w.add_events(np.asarray(events, dtype=np.int64))
        w.add_source({"name": "test", "size": None, "rows": signal.shape[0], "sha256": None})
        w.commit()
    return path


def tree(folder: Path) -> dict[str, bytes | None]:
    """Every entry under ``folder``, hidden ones included: files byte for byte, folders as None.

    Unlike ``snapshot`` it also sees empty folders and temporaries, so "nothing left behind" holds.
    """
    return {
        str(p.relative_to(folder)): (None if p.is_dir() else p.read_bytes())
        for p in sorted(folder.rglob("*"))
    }


def run_trial(choice: Any, seconds: dict[bool, float], batches: int) -> list[bool]:
    """Drive a compile trial (JitChoice, LoopChoice) to its decision: each trial element of
    ``batches`` takes ``seconds[mode]``, the first of the True mode 30 s (it compiles); returns the
    modes tried."""
    modes: list[bool] = []
    while not choice.decided:
        mode = choice.next_mode()
        modes.append(mode)
        compiling = mode and mode not in modes[:-1]
        choice.timed(mode, 30.0 if compiling else seconds[mode], batches)
    return modes


def on_a_terminal(*args: str | os.PathLike[str]) -> tuple[int, bytes, bytes]:
    """Run ``chunkfit ARGS`` with stderr on a pseudo-terminal: its exit code, what it drew there,
    and its stdout. Skips the test on a machine that offers no pseudo-terminal."""
    import pytest

    try:
        controller, terminal = pty.openpty()
    except OSError:
        pytest.skip("this machine offers no pseudo-terminal")
    proc = subprocess.Popen(
        cli_command(*args),
        env={**cli_env(), "COLUMNS": "120", "TERM": "xterm"},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=terminal,
    )
    os.close(terminal)
    drawn = b""
    while True:
        try:
            chunk = os.read(controller, 4096)
        except OSError:  # the terminal's other end closed: the process is done with it
            break
        if not chunk:
            break
        drawn += chunk
    out, _ = proc.communicate(timeout=240)
    os.close(controller)
    return proc.returncode, drawn, out

"""The CLI end to end in real subprocesses: the shipped ECG log, info, synth, standard input,
Ctrl-C and kill -9 during a live stream, the progress bar, and bounded memory.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from livesupport import Stream, stream_values, wait_for
from support import (
    REPO,
    SUFFIX,
    cli_command,
    cli_env,
    examples,
    make_store,
    on_a_terminal,
    run_cli,
    write_csv,
)

import chunkfit
from chunkfit.synth import SynthSpec, anomaly_positions

ECG_SAMPLES = 108_000


@pytest.fixture(scope="module")
def ecg_values() -> np.ndarray:
    return np.loadtxt(REPO / "data" / "ecg208.csv", delimiter=",", skiprows=1, dtype=np.float64)


@pytest.fixture(scope="module", params=["zarr", "hdf5"])
def ecg_store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """The shipped ECG log ingested once per backend by the CLI; the tests below read it."""
    store = tmp_path_factory.mktemp("ecg") / f"ecg{SUFFIX[request.param]}"
    data = REPO / "data"
    result = run_cli(
        "ingest",
        store,
        data / "ecg208.csv",
        "--time-column",
        "time_s",
        "--events",
        data / "ecg208_events.txt",
    )
    return store, result


def test_ecg_log_ingests_into_a_store_equal_to_the_csv(
    ecg_store: tuple[Path, subprocess.CompletedProcess[str]],
    ecg_values: np.ndarray,
    ecg_events: Path,
) -> None:
    store, result = ecg_store
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(
        f"created {store}: 108,000 samples at 360 Hz, 1 segment(s), 500 event(s) in "
    )
    with chunkfit.open_store(store) as s:
        assert (s.n_samples, s.channels, s.sample_rate) == (ECG_SAMPLES, ["mlii_mv"], 360.0)
        np.testing.assert_array_equal(
            s.read(0, ECG_SAMPLES)[:, 0], ecg_values[:, 1].astype(np.float32)
        )
        np.testing.assert_array_equal(s.events, np.loadtxt(ecg_events, dtype=np.int64))
        assert s.segments.tolist() == [[0, ECG_SAMPLES]]


def test_progress_bar_is_silent_when_stderr_is_not_a_terminal(
    ecg_store: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    _store, result = ecg_store
    assert (result.returncode, result.stderr) == (0, "")


def test_info_describes_the_ecg_store(
    ecg_store: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    store, _ = ecg_store
    result = run_cli("info", store)
    assert (result.returncode, result.stderr) == (0, "")
    lines = result.stdout.splitlines()
    assert lines[:7] == [
        f"store        {store} ({'hdf5' if store.suffix == '.h5' else 'zarr'})",
        "samples      108,000",
        "channels     1: mlii_mv",
        "rate         360 Hz",
        "duration     300.0 s (0.08 h)",
        "segments     1",
        "events       500",
    ]
    assert lines[7].startswith("chunking     ")
    assert any(line.startswith("on disk      ") and "ratio" in line for line in lines)


def test_info_shows_long_channel_names_whole(tmp_path: Path) -> None:
    names = ["CH.BALST..LHZ", "CH.BALST..LHN"]  # alike in their first 12 characters
    store = make_store(tmp_path / "s.zarr", np.zeros((10, 2), np.float32), channels=names)
    result = run_cli("info", store)
    rows = [line.split()[0] for line in result.stdout.splitlines() if line.startswith("CH.")]
    assert (result.returncode, rows) == (0, names)


def test_info_json_holds_counts_stats_and_sources(
    ecg_store: tuple[Path, subprocess.CompletedProcess[str]], ecg_values: np.ndarray, ecg_csv: Path
) -> None:
    store, _ = ecg_store
    result = run_cli("info", "--json", store)
    assert (result.returncode, result.stderr) == (0, "")
    info = json.loads(result.stdout)
    assert (info["samples"], info["channels"], info["sample_rate"], info["events"]) == (
        ECG_SAMPLES,
        ["mlii_mv"],
        360.0,
        500,
    )
    assert (info["duration_s"], info["segments"], info["segment_ranges"]) == (
        300.0,
        1,
        [[0, ECG_SAMPLES]],
    )
    x = ecg_values[:, 1].astype(np.float32).astype(np.float64)
    stats = info["stats"]["mlii_mv"]
    assert stats["count"] == ECG_SAMPLES
    np.testing.assert_allclose(
        [stats["mean"], stats["std"], stats["min"], stats["max"]],
        [x.mean(), x.std(), x.min(), x.max()],
        rtol=1e-9,
    )
    assert info["sources"][0]["rows"] == ECG_SAMPLES
    assert info["sources"][0]["size"] == ecg_csv.stat().st_size
    assert info["bytes_on_disk"] > 0 and info["compression_ratio"] > 1


def test_cli_py_from_a_checkout_does_exactly_what_python_m_chunkfit_does(
    ecg_store: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    store, _ = ecg_store
    via_script = subprocess.run(
        [sys.executable, str(REPO / "cli.py"), "info", "--json", str(store)],
        check=False,
        env=cli_env(),
        capture_output=True,
        text=True,
    )
    via_module = run_cli("info", "--json", store)
    assert (via_script.returncode, via_script.stdout, via_script.stderr) == (
        0,
        via_module.stdout,
        via_module.stderr,
    )


def test_cli_py_reports_errors_exactly_like_python_m_chunkfit(tmp_path: Path) -> None:
    via_script = subprocess.run(
        [sys.executable, str(REPO / "cli.py"), "info", str(tmp_path / "nope.zarr")],
        check=False,
        env=cli_env(),
        capture_output=True,
        text=True,
    )
    via_module = run_cli("info", tmp_path / "nope.zarr")
    assert (via_script.returncode, via_script.stderr) == (via_module.returncode, via_module.stderr)
    assert via_module.returncode == 1


def test_ingest_json_report_describes_what_was_added(tmp_path: Path, small_csv: Path) -> None:
    result = run_cli("ingest", tmp_path / "s.zarr", small_csv, "--time-column", "t", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["samples"], report["segments"], report["events"], report["sample_rate"]) == (
        300,
        1,
        0,
        100.0,
    )
    assert report["sources"][0]["rows"] == 300


def test_synth_writes_the_dummy_problem_with_its_anomalies_as_events(
    tmp_path: Path, backend: str
) -> None:
    store = tmp_path / f"synth{SUFFIX[backend]}"
    result = run_cli("synth", store, "--samples", "20000", "--anomalies", "300", "--seed", "4")
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == f"created {store}: 20,000 samples, 300 events (seed 4)\n"
    positions = anomaly_positions(SynthSpec(samples=20000, anomalies=300, seed=4))
    with chunkfit.open_store(store) as s:
        x = s.read(0, 20000)[:, 0].astype(np.float64)
        np.testing.assert_array_equal(s.events, positions)
    residual = x - np.sin(np.arange(20000))
    bumped = np.zeros(20000, dtype=bool)
    bumped[positions] = True
    assert len(np.unique(positions)) == 300
    # noise ~ N(0, 0.2): the means are within a few standard errors of 0.5 and 0
    assert abs(residual[bumped].mean() - 0.5) < 0.06
    assert abs(residual[~bumped].mean()) < 0.01
    assert abs(residual[~bumped].std() - 0.2) < 0.01


def test_synth_with_the_same_seed_writes_the_same_signal(tmp_path: Path) -> None:
    for name in ("a.zarr", "b.zarr"):
        assert (
            run_cli(
                "synth", tmp_path / name, "--samples", "3000", "--anomalies", "10", "--seed", "9"
            ).returncode
            == 0
        )
    with (
        chunkfit.open_store(tmp_path / "a.zarr") as a,
        chunkfit.open_store(tmp_path / "b.zarr") as b,
    ):
        np.testing.assert_array_equal(a.read(0, 3000), b.read(0, 3000))


# -- standard input --------------------------------------------------------------------------------


def test_stdin_redirected_from_a_file_equals_ingesting_the_file(
    tmp_path: Path, small_csv: Path, backend: str
) -> None:
    store = tmp_path / f"in{SUFFIX[backend]}"
    with open(small_csv, "rb") as f:
        result = run_cli("ingest", store, "--time-column", "t", stdin=f)
    assert (result.returncode, result.stderr) == (0, "")
    with chunkfit.open_store(store) as s:
        expected = np.loadtxt(small_csv, delimiter=",", skiprows=1)[:, 1:].astype(np.float32)
        np.testing.assert_array_equal(s.read(0, s.n_samples), expected)
        assert s.attrs["sources"][0]["name"] == "<stdin>"
        assert s.attrs["sources"][0]["size"] == small_csv.stat().st_size


@examples(3)  # each example is a real process: a few suffice next to the in-process CSV property
@given(
    values=st.tuples(st.integers(1, 60), st.integers(1, 3)).flatmap(
        lambda shape: hnp.arrays(
            np.float64, shape, elements=st.floats(-1e30, 1e30, allow_nan=False)
        )
    ),
    header=st.booleans(),
    delimiter=st.sampled_from([",", "\t"]),
)
def test_stdin_round_trip_through_a_pipe(
    backend: str, values: np.ndarray, header: bool, delimiter: str
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        names = [f"v{j}" for j in range(values.shape[1])] if header else None
        text = write_csv(
            Path(tmp) / "in.csv", values, names=names, delimiter=delimiter
        ).read_bytes()
        store = Path(tmp) / f"in{SUFFIX[backend]}"
        result = run_cli("ingest", store, "-", "--rate", "5", input=text)
        assert (result.returncode, result.stderr) == (0, "")
        with chunkfit.open_store(store) as s:
            np.testing.assert_array_equal(s.read(0, s.n_samples), values.astype(np.float32))


SLOW_WRITER = textwrap.dedent(
    """
    import sys, time
    rows, pause = int(sys.argv[1]), float(sys.argv[2])
    out = sys.stdout
    out.write("t,v\\n")
    for i in range(rows):
        out.write(f"{i / 100},{i}\\n")
        out.flush()
        time.sleep(pause)
    """
)


def _pipe_from_writer(
    tmp_path: Path, store: Path, rows: int, pause: float, *extra: str
) -> tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]]:
    writer = subprocess.Popen(
        [sys.executable, "-c", SLOW_WRITER, str(rows), str(pause)], stdout=subprocess.PIPE
    )
    assert writer.stdout is not None
    ingest = subprocess.Popen(
        cli_command("ingest", str(store), "--time-column", "t", *extra),
        cwd=tmp_path,
        env=cli_env(),
        stdin=writer.stdout,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    writer.stdout.close()  # only the ingest holds the read end now
    return writer, ingest


def test_stdin_from_a_slow_writer_is_stored_whole_when_it_closes(
    tmp_path: Path, backend: str
) -> None:
    store = tmp_path / f"live{SUFFIX[backend]}"
    writer, ingest = _pipe_from_writer(tmp_path, store, rows=60, pause=0.01)
    out, err = ingest.communicate(timeout=240)
    writer.wait()
    assert (ingest.returncode, err) == (0, b"")
    assert out.decode().startswith(f"created {store}: 60 samples at 100 Hz, 1 segment(s)")
    with chunkfit.open_store(store) as s:
        np.testing.assert_array_equal(s.read(0, 60)[:, 0], np.arange(60, dtype=np.float32))


def _stream_read_whole(tmp_path: Path, store: Path, streams: list[Stream], *extra: str) -> Stream:
    """A stream of 300 rows whose writer then holds the pipe open, once the ingest has opened its
    transaction (its temporary, or the store a live commit made of it) and read every row."""
    stream = Stream(tmp_path, store, [300], *extra, hold=True)
    streams.append(stream)
    temporary = store.parent / f".{store.name}.chunkfit-tmp-{stream.ingest.pid}"
    wait_for(
        lambda: stream.drained(0) and (temporary.exists() or store.exists()),
        stream.ingest,
        seconds=240,  # a loaded machine starts Python slowly
    )
    return stream


def test_ctrl_c_during_a_stdin_stream_commits_the_rows_that_arrived(
    tmp_path: Path, backend: str, streams: list[Stream]
) -> None:
    store = tmp_path / f"live{SUFFIX[backend]}"
    stream = _stream_read_whole(tmp_path, store, streams)
    stream.ingest.send_signal(signal.SIGINT)
    out, err = stream.ingest.communicate(timeout=240)
    assert (stream.ingest.returncode, err) == (0, b""), err
    assert out.decode().rstrip().endswith("(stream ended by Ctrl-C)")
    with chunkfit.open_store(store) as s:
        n = s.n_samples
        assert n == 300
        np.testing.assert_array_equal(s.read(0, n)[:, 0], stream_values(stream.gate))
        assert s.segments.tolist() == [[0, n]]


def test_kill_9_during_a_stdin_stream_before_its_first_commit_leaves_no_store(
    tmp_path: Path, backend: str, streams: list[Stream]
) -> None:
    """(A zarr stream commits every --commit-every seconds: tests/test_live.py kills one between
    commits.)"""
    store = tmp_path / f"live{SUFFIX[backend]}"
    late = ("--commit-every", "600") if backend == "zarr" else ()
    stream = _stream_read_whole(tmp_path, store, streams, *late)
    assert not store.exists()  # no commit yet: the rows are in the transaction only
    stream.ingest.kill()
    stream.ingest.communicate(timeout=240)
    assert not store.exists()


def test_progress_bar_is_drawn_on_a_terminal_and_keeps_stdout_clean(
    tmp_path: Path, small_csv: Path
) -> None:
    code, drawn, out = on_a_terminal(
        "ingest", tmp_path / "p.zarr", small_csv, "--time-column", "t", "--json"
    )
    assert code == 0
    assert b"ingest" in drawn and b"300 rows" in drawn
    assert json.loads(out)["samples"] == 300


# -- bounded memory --------------------------------------------------------------------------------

MEASURE = textwrap.dedent(
    """
    import resource, subprocess, sys
    subprocess.run(sys.argv[1:], check=True)
    print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    """
)
INGEST = (
    "import chunkfit, sys; chunkfit.ingest(sys.argv[1], [sys.argv[2]], "
    "chunkfit.IngestOptions(rate=10.0, block_bytes=1 << 20))"
)


def _peak_rss_kib(tmp_path: Path, source: Path) -> int:
    """Peak resident memory of one ingest of ``source`` in a fresh process (its own getrusage)."""
    # Glibc's per-thread arenas and Arrow's allocator keep freed memory for reuse, which makes
    # RSS creep for a while; one arena and the system allocator take that noise out.
    env = {**cli_env(), "MALLOC_ARENA_MAX": "1", "ARROW_DEFAULT_MEMORY_POOL": "system"}
    store = tmp_path / f"{source.stem}.zarr"
    out = subprocess.run(
        [sys.executable, "-c", MEASURE, sys.executable, "-c", INGEST, str(store), str(source)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout.strip())


@pytest.mark.slow
def test_peak_memory_does_not_grow_with_the_size_of_the_source(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    block = "".join(
        f"{a:.5f},{b:.5f},{c:.5f},{d:.5f}\n" for a, b, c, d in rng.normal(size=(50_000, 4))
    ).encode()
    sizes = {"small": 25, "large": 100}  # repeats of a ~1.8 MB block: ~45 MB and ~180 MB
    for name, repeats in sizes.items():
        with open(tmp_path / f"{name}.csv", "wb") as f:
            f.write(b"a,b,c,d\n")
            f.writelines(block for _ in range(repeats))
    small, large = (_peak_rss_kib(tmp_path, tmp_path / f"{name}.csv") for name in sizes)
    extra_source_kib = (sizes["large"] - sizes["small"]) * len(block) // 1024
    # Holding even a fifth of the extra ~135 MB would show; allocator noise is a few MB.
    assert large - small < extra_source_kib // 5, (small, large)

"""Several workers (TF_CONFIG, real processes on 127.0.0.1) and several devices (--devices cpu:2)
train what one process trains on the same global batch, with a run folder on a (shared) file system
or on object storage (moto's S3 server on loopback); a killed worker stops the others with one line
and the same commands resume; bad cluster set-ups are one line each.

Tolerance: weights and epoch logs within 1e-5 absolute (float32 sums of gradients and metric totals
in another order; measured differences are below 1e-7 here).
"""

from __future__ import annotations

import csv
import io
import json
import signal
import subprocess
import time
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from s3support import S3Server, make_bucket, s3fs_client, use_server
from support import cli_command, cli_env, free_ports, make_store

from chunkfit.core.blocks import window_order

pytestmark = pytest.mark.slow

TOLERANCE = 1e-5
TIMEOUT = 240  # seconds any one run may take here
ARGS = (
    "--window",
    "32",
    "--stride",
    "4",
    "--chunk",
    "300",
    "--mix",
    "2",
    "--batch-size",
    "30",
    "--epochs",
    "2",
    "--deterministic",
    "--compute-threads",
    "1",
    "--jit",
    "off",
    "--checkpoint-every",
    "1",
)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """8000 samples x 2 channels, two segments, 60 events: 12 training blocks of up to 300
    windows."""
    rng = np.random.default_rng(0)
    signal_ = rng.normal(size=(8000, 2)).astype(np.float32)
    events = np.sort(rng.choice(np.arange(50, 7950), 60, replace=False))
    for e in events:
        signal_[e : e + 5, 0] += 4
    return make_store(
        tmp_path_factory.mktemp("workers") / "s.zarr",
        signal_,
        events=events,
        segments=[(0, 5000), (5000, 8000)],
    )


def tf_config(ports: Sequence[int], index: int) -> str:
    return json.dumps(
        {
            "cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
            "task": {"type": "worker", "index": index},
        }
    )


class Workers:
    """N ``chunkfit train`` processes of one cluster; every one is killed on exit if still
    running."""

    def __init__(
        self,
        store: Path,
        outs: Sequence[Path | str],
        extra: Sequence[Sequence[str]] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.ports = free_ports(len(outs))
        self.procs = []
        for i, out in enumerate(outs):
            more = list(extra[i]) if extra is not None else []
            environ = {
                **cli_env(),
                "TF_CONFIG": tf_config(self.ports, i),
                **(env if i == 0 and env else {}),
            }
            self.procs.append(
                subprocess.Popen(
                    cli_command("train", str(store), *ARGS, "--out", str(out), *more),
                    env=environ,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                )
            )

    def wait(self, timeout: float = TIMEOUT) -> list[tuple[int, str, str]]:
        deadline = time.monotonic() + timeout
        out = []
        for p in self.procs:
            stdout, stderr = p.communicate(timeout=max(deadline - time.monotonic(), 1))
            out.append((p.returncode, stdout.decode(), stderr.decode()))
        return out

    def kill(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=30)


@pytest.fixture
def workers() -> Iterator[list[Workers]]:
    started: list[Workers] = []
    try:
        yield started
    finally:
        for w in started:
            w.kill()


def run_single(store: Path, out: Path, *more: str) -> subprocess.CompletedProcess[bytes]:
    result = subprocess.run(
        cli_command("train", str(store), *ARGS, "--out", str(out), *more),
        env=cli_env(),
        capture_output=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode()
    return result


def weights(run: Path) -> list[np.ndarray]:
    import h5py

    with (
        zipfile.ZipFile(run / "model.keras") as z,
        h5py.File(io.BytesIO(z.read("model.weights.h5"))) as f,
    ):
        found: list[np.ndarray] = []
        f.visititems(lambda _n, o: found.append(o[()]) if isinstance(o, h5py.Dataset) else None)
    return found


def history(run: Path) -> list[dict[str, float]]:
    with open(run / "history.csv") as f:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]


def assert_same_run(a: Path, b: Path) -> None:
    wa, wb = weights(a), weights(b)
    assert len(wa) == len(wb) > 0
    assert max(float(np.max(np.abs(x - y))) for x, y in zip(wa, wb, strict=True)) <= TOLERANCE
    ha, hb = history(a), history(b)
    assert [sorted(r) for r in ha] == [sorted(r) for r in hb]
    assert max(abs(r[k] - s[k]) for r, s in zip(ha, hb, strict=True) for k in r) <= TOLERANCE


def error_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.fixture(scope="module")
def single(store: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("single") / "run"
    run_single(store, out)
    return out


@pytest.fixture(scope="module")
def two(
    store: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, list[tuple[int, str, str]]]:
    out = tmp_path_factory.mktemp("two") / "run"
    w = Workers(store, [out, out])
    try:
        return out, w.wait()
    finally:
        w.kill()


def test_two_workers_train_the_single_process_run(
    two: tuple[Path, list[tuple[int, str, str]]], single: Path
) -> None:
    out, results = two
    assert [r[0] for r in results] == [0, 0], results
    assert_same_run(single, out)


def test_only_the_chief_writes_the_run_folder(two: tuple[Path, list[tuple[int, str, str]]]) -> None:
    out, results = two
    assert sorted(p.name for p in out.iterdir()) == [
        "curves.png",
        "history.csv",
        "model.keras",
        "run.json",
    ]
    assert results[1][1].splitlines()[-1].startswith("worker 1 (127.0.0.1:")
    assert "the chief, worker 0 (127.0.0.1:" in results[1][1].splitlines()[-1]


def test_run_json_says_the_batch_is_global_across_two_workers(
    two: tuple[Path, list[tuple[int, str, str]]],
) -> None:
    about = json.loads((two[0] / "run.json").read_text())["distribution"]
    assert (
        about["strategy"],
        about["workers"],
        about["replicas"],
        about["batch_size"],
        about["replica_batch"],
    ) == ("MultiWorkerMirroredStrategy", 2, 2, "global", 15)


def test_every_window_is_trained_once_per_epoch_across_workers(
    two: tuple[Path, list[tuple[int, str, str]]],
) -> None:
    record = json.loads((two[0] / "run.json").read_text())
    batch = 30
    for epoch in record["epochs"]:
        per_replica = epoch["replica_windows"]
        assert len(per_replica) == 2
        seen: list[tuple[int, int]] = []
        for shares in per_replica:
            for share in shares:
                full, lo, hi = share["full_batches"]
                seen += [
                    (share["group"], b * batch + i) for b in range(full) for i in range(lo, hi)
                ]
                if "last_batch" in share:
                    seen += [(share["group"], i) for i in range(*share["last_batch"])]
        groups = per_replica[0]
        expected = [(g["group"], i) for g in groups for i in range(g["windows"])]
        assert sorted(seen) == sorted(expected)
        assert sum(g["windows"] for g in groups) == epoch["train_windows"]


def test_window_order_is_a_pure_function_of_seed_epoch_and_group() -> None:
    assert np.array_equal(window_order(50, 0, 1, 2, True), window_order(50, 0, 1, 2, True))


def test_two_logical_cpu_devices_train_the_single_process_run(
    store: Path, single: Path, tmp_path: Path
) -> None:
    run_single(store, tmp_path / "run", "--devices", "cpu:2")
    assert_same_run(single, tmp_path / "run")
    about = json.loads((tmp_path / "run" / "run.json").read_text())["distribution"]
    assert (about["strategy"], about["workers"], about["replicas"]) == ("MirroredStrategy", 1, 2)


def test_two_logical_cpu_devices_train_augmented_batches_on_each_replica(
    store: Path, single: Path, tmp_path: Path
) -> None:
    spec = "noise=20,gain=0.1,offset=0.05,flip,shift=4,mix=0.5"
    run_single(store, tmp_path / "run", "--devices", "cpu:2", "--augment", spec)
    assert json.loads((tmp_path / "run" / "run.json").read_text())["augment"]["spec"] == spec
    moved = max(
        float(np.max(np.abs(x - y)))
        for x, y in zip(weights(single), weights(tmp_path / "run"), strict=True)
    )
    assert moved > 100 * TOLERANCE


def test_a_killed_worker_stops_the_other_with_one_line_and_the_same_commands_resume(
    store: Path,
    two: tuple[Path, list[tuple[int, str, str]]],
    tmp_path: Path,
    workers: list[Workers],
) -> None:
    out = tmp_path / "run"
    # The chief pauses inside its second checkpoint (after the first one is whole), mid-epoch 1.
    w = Workers(store, [out, out], env={"CHUNKFIT_TEST_CHECKPOINT_PAUSE": "2:120"})
    workers.append(w)
    deadline = time.monotonic() + TIMEOUT
    while not list(out.glob("*/PAUSED")):
        assert time.monotonic() < deadline and w.procs[0].poll() is None, "the chief never paused"
        time.sleep(0.05)
    w.procs[1].send_signal(signal.SIGKILL)
    w.procs[1].wait(timeout=30)
    for flag in out.glob("*/PAUSED"):
        flag.unlink()
    _, stderr = w.procs[0].communicate(timeout=TIMEOUT)
    assert w.procs[0].returncode != 0
    line = error_line(
        stderr.decode()
    )  # chunkfit's line alone: TensorFlow's native lines go to /dev/null
    assert line.startswith("chunkfit: error: ")
    assert f"worker 1 (127.0.0.1:{w.ports[1]})" in line
    assert "run the same chunkfit train command on every worker to resume" in line
    again = Workers(store, [out, out])
    workers.append(again)
    results = again.wait()
    assert [r[0] for r in results] == [0, 0], results
    assert "resuming the run" in results[0][1]
    assert_same_run(two[0], out)


@dataclass
class TimedOut:
    """A chief whose worker 1 was killed before the cluster formed, as it was left."""

    out: Path
    ports: list[int]
    returncode: int | None
    stderr: str
    files: list[str]  # what the run folder held once the chief had stopped


@pytest.fixture(scope="module")
def timed_out(store: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TimedOut]:
    """Two workers with --cluster-timeout 3; worker 1 killed at once: it cannot have joined, it has
    not yet imported chunkfit. The rerun test below then reruns in the same folder."""
    out = tmp_path_factory.mktemp("timed-out") / "run"
    w = Workers(store, [out, out], extra=[["--cluster-timeout", "3"]] * 2)
    try:
        w.procs[1].send_signal(signal.SIGKILL)
        w.procs[1].wait(timeout=30)
        _, stderr = w.procs[0].communicate(timeout=TIMEOUT)
        files = sorted(p.name for p in out.rglob("*"))
        yield TimedOut(out, w.ports, w.procs[0].returncode, stderr.decode(), files)
    finally:
        w.kill()


def test_a_worker_killed_during_start_up_stops_the_other_after_the_cluster_timeout(
    timed_out: TimedOut,
) -> None:
    assert timed_out.returncode == -signal.SIGKILL  # 137 in a shell: the wait cannot be ended
    ports = timed_out.ports
    assert error_line(timed_out.stderr) == (
        f"chunkfit: error: worker 1 (127.0.0.1:{ports[1]}, TF_CONFIG task worker:1) did not "
        "join the cluster within 3 s (--cluster-timeout), and nothing answers at its address; "
        f"this worker, worker 0 (127.0.0.1:{ports[0]}), stopped waiting: start the same "
        "chunkfit train command on every worker, or give them longer with --cluster-timeout"
    )
    # Nothing written but the chief's lock (a dead process's, which the next run takes over).
    assert timed_out.files == [".chunkfit.lock"]


def test_the_same_commands_rerun_after_a_cluster_timeout_train_the_whole_run(
    store: Path,
    two: tuple[Path, list[tuple[int, str, str]]],
    timed_out: TimedOut,
    workers: list[Workers],
) -> None:
    out = timed_out.out
    assert (timed_out.returncode, timed_out.files) == (-signal.SIGKILL, [".chunkfit.lock"])
    # The chief's stale lock is the only thing left: the rerun takes it over and starts afresh.
    again = Workers(store, [out, out])
    workers.append(again)
    results = again.wait()
    assert [r[0] for r in results] == [0, 0], results
    assert "resuming" not in results[0][1]
    assert_same_run(two[0], out)


def test_a_cluster_timeout_that_is_not_positive_is_one_line(store: Path, tmp_path: Path) -> None:
    result = subprocess.run(
        cli_command(
            "train", str(store), *ARGS, "--out", str(tmp_path / "run"), "--cluster-timeout", "0"
        ),
        env={**cli_env(), "TF_CONFIG": tf_config(free_ports(2), 0)},
        capture_output=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert result.returncode == 2
    assert error_line(result.stderr.decode()) == (
        "chunkfit: error: --cluster-timeout must be a positive number of seconds (received 0.0)"
    )


@pytest.fixture(scope="module")
def s3_bucket(s3_server: S3Server) -> Iterator[str]:
    """A bucket for this module's s3 runs; this process's S3 environment (which the workers inherit)
    points at the session's server meanwhile."""
    env = use_server(s3_server)
    next(env)
    yield make_bucket()
    next(env, None)


def s3_objects(url: str) -> list[str]:
    fs, prefix = s3fs_client(), url.removeprefix("s3://")
    return sorted(k[len(prefix) + 1 :] for k in fs.find(prefix))


def downloaded(url: str, local: Path) -> Path:
    s3fs_client().get(url.removeprefix("s3://"), str(local), recursive=True)
    return local


@pytest.fixture(scope="module")
def two_s3(store: Path, s3_bucket: str) -> tuple[str, list[tuple[int, str, str]]]:
    url = f"s3://{s3_bucket}/runs/two"
    w = Workers(store, [url, url])
    try:
        return url, w.wait()
    finally:
        w.kill()


def test_two_workers_with_an_s3_run_folder_train_the_single_process_run(
    two_s3: tuple[str, list[tuple[int, str, str]]], single: Path, tmp_path: Path
) -> None:
    url, results = two_s3
    assert [r[0] for r in results] == [0, 0], results
    assert_same_run(single, downloaded(url, tmp_path / "run"))


def test_two_workers_leave_only_the_run_files_in_the_s3_run_folder(
    two_s3: tuple[str, list[tuple[int, str, str]]],
) -> None:
    url, results = two_s3
    assert s3_objects(url) == ["curves.png", "history.csv", "model.keras", "run.json"]
    assert results[1][1].splitlines()[-1].endswith(f"wrote the run folder {url}")


def test_a_killed_worker_with_an_s3_run_folder_stops_the_other_and_both_resume_from_the_pointer(
    store: Path, single: Path, s3_bucket: str, tmp_path: Path, workers: list[Workers]
) -> None:
    url = f"s3://{s3_bucket}/runs/killed"
    stage = tmp_path / "stage"  # the chief's staging folder of the s3 run is made here
    stage.mkdir()
    w = Workers(
        store, [url, url], env={"CHUNKFIT_TEST_CHECKPOINT_PAUSE": "2:120", "TMPDIR": str(stage)}
    )
    workers.append(w)
    deadline = time.monotonic() + TIMEOUT
    while not list(stage.glob("chunkfit-run-*/run/*/PAUSED")):
        assert time.monotonic() < deadline and w.procs[0].poll() is None, "the chief never paused"
        time.sleep(0.05)
    w.procs[1].send_signal(signal.SIGKILL)
    w.procs[1].wait(timeout=30)
    for flag in stage.glob("chunkfit-run-*/run/*/PAUSED"):
        flag.unlink()
    _, stderr = w.procs[0].communicate(timeout=90)
    assert w.procs[0].returncode != 0
    line = error_line(stderr.decode())
    assert f"worker 1 (127.0.0.1:{w.ports[1]})" in line
    assert f"is intact in {url}" in line
    again = Workers(store, [url, url])
    workers.append(again)
    results = again.wait()
    assert [r[0] for r in results] == [0, 0], results
    # Both resumed from the checkpoint the pointer names (worker 1 without the run's lease),
    # mid-epoch.
    resumed = [
        [
            x
            for x in r[1].splitlines()
            if x.startswith(f"resuming the run in {url} from its checkpoint")
        ]
        for r in results
    ]
    assert len(resumed[0]) == 1 and resumed[1] == resumed[0], results
    assert "of 2 epoch(s) and" in resumed[0][0]
    assert_same_run(single, downloaded(url, tmp_path / "run"))


def test_a_worker_given_another_s3_run_folder_is_one_line_and_leaves_no_objects(
    store: Path, s3_bucket: str, workers: list[Workers]
) -> None:
    chief, elsewhere = f"s3://{s3_bucket}/runs/chief", f"s3://{s3_bucket}/runs/elsewhere"
    w = Workers(store, [chief, elsewhere])
    workers.append(w)
    results = w.wait()
    for code, _, stderr in results:
        assert code != 0
        assert f"worker 1 (127.0.0.1:{w.ports[1]}) cannot read the run folder" in error_line(stderr)
    assert s3_objects(chief) == []
    assert s3_objects(elsewhere) == []


def test_malformed_tf_config_is_one_line(store: Path, tmp_path: Path) -> None:
    result = subprocess.run(
        cli_command("train", str(store), *ARGS, "--out", str(tmp_path / "run")),
        env={**cli_env(), "TF_CONFIG": "{not json"},
        capture_output=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert result.returncode != 0
    assert "TF_CONFIG is not a valid cluster description (not JSON" in error_line(
        result.stderr.decode()
    )
    assert not (tmp_path / "run").exists()


def test_a_worker_started_with_other_settings_is_named_in_one_line(
    store: Path, tmp_path: Path, workers: list[Workers]
) -> None:
    out = tmp_path / "run"
    w = Workers(store, [out, out], extra=[[], ["--seed", "7"]])
    workers.append(w)
    results = w.wait()
    for code, _, stderr in results:
        assert code != 0
        line = error_line(stderr)
        assert f"worker 1 (127.0.0.1:{w.ports[1]}) was started with other settings" in line
        assert "run the same chunkfit train command on every worker" in line
    assert not out.exists()


def test_a_run_folder_a_worker_cannot_read_is_one_line(
    store: Path, tmp_path: Path, workers: list[Workers]
) -> None:
    w = Workers(store, [tmp_path / "chief", tmp_path / "elsewhere"])
    workers.append(w)
    results = w.wait()
    for code, _, stderr in results:
        assert code != 0
        assert f"worker 1 (127.0.0.1:{w.ports[1]}) cannot read the run folder" in error_line(stderr)
    assert not (tmp_path / "chief").exists()
    assert not (tmp_path / "elsewhere").exists()


def test_a_run_resumes_on_another_number_of_replicas(
    store: Path, single: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    proc = subprocess.Popen(
        cli_command("train", str(store), *ARGS, "--out", str(out)),
        env={**cli_env(), "CHUNKFIT_TEST_CHECKPOINT_PAUSE": "2:120"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + TIMEOUT
        while not list(out.glob("*/PAUSED")):
            assert time.monotonic() < deadline and proc.poll() is None, "the run never paused"
            time.sleep(0.05)
        proc.kill()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    result = run_single(store, out, "--devices", "cpu:2")
    assert "resuming the run" in result.stdout.decode()
    assert_same_run(single, out)


def test_launch_starts_local_workers_that_train_the_single_process_run(
    store: Path, single: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    result = subprocess.run(
        cli_command(
            "launch", "--workers", "2", "--", "train", str(store), *ARGS, "--out", str(out)
        ),
        env=cli_env(),
        capture_output=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode()
    assert_same_run(single, out)
    about = json.loads((out / "run.json").read_text())["distribution"]
    assert (about["workers"], about["addresses"][0].split(":")[0]) == (2, "127.0.0.1")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--workers", "1", "--", "train", "s.zarr"), "--workers must be 2"),
        (("--workers", "2", "--", "predict", "run"), "runs chunkfit train"),
    ],
)
def test_launch_refuses_what_it_cannot_run_in_one_line(args: tuple[str, ...], needle: str) -> None:
    result = subprocess.run(
        cli_command("launch", *args), env=cli_env(), capture_output=True, timeout=60, check=False
    )
    assert result.returncode != 0
    assert needle in error_line(result.stderr.decode())

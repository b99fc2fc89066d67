"""Training from an ``s3://`` store into an ``s3://`` run folder (real CLI subprocesses, moto on
loopback): the run's files land in the bucket, and a run killed mid-training resumes from its last
uploaded checkpoint in a fresh process."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from s3support import s3fs_client
from support import cli_command, cli_env, run_cli

from chunkfit.synth import SynthSpec, balanced_anomalies, synth

pytestmark = pytest.mark.slow

WINDOW = 16
SAMPLES = 2_000
TRAIN = ["--window", str(WINDOW), "--chunk", "64", "--batch-size", "32", "--mix", "1", "--validation", "0.1"]


@pytest.fixture
def s3_store(bucket: str) -> str:
    url = f"s3://{bucket}/synth.zarr"
    synth(url, SynthSpec(samples=SAMPLES, anomalies=balanced_anomalies(SAMPLES, WINDOW), seed=1))
    return url


def _objects(prefix: str) -> list[str]:
    fs = s3fs_client()
    return sorted(k[len(prefix) + 1 :] for k in fs.find(prefix))


def test_train_from_an_s3_store_into_an_s3_run_folder_writes_the_run_there(s3_store: str, bucket: str) -> None:
    run = f"s3://{bucket}/runs/a"
    result = run_cli("train", s3_store, *TRAIN, "--epochs", "1", "--out", run)
    assert result.returncode == 0, result.stderr
    assert f"run folder {run}:" in result.stdout
    assert _objects(f"{bucket}/runs/a") == ["curves.png", "history.csv", "model.keras", "run.json"]
    record = json.loads(s3fs_client().cat_file(f"{bucket}/runs/a/run.json"))
    assert record["finished"] is True and record["store"]["path"] == s3_store


def test_train_from_an_s3_store_into_a_local_run_folder(s3_store: str, tmp_path: Path) -> None:
    result = run_cli("train", s3_store, *TRAIN, "--epochs", "1", "--out", tmp_path / "r")
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == ["curves.png", "history.csv", "model.keras", "run.json"]


def test_killed_s3_run_resumes_from_its_uploaded_checkpoint_in_a_fresh_process(s3_store: str, bucket: str) -> None:
    run = f"s3://{bucket}/runs/k"
    args = ["train", s3_store, *TRAIN, "--chunk", "256", "--epochs", "2", "--checkpoint-every", "1", "--out", run]
    proc = subprocess.Popen(cli_command(*args), env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    fs, pointer = s3fs_client(), f"{bucket}/runs/k/checkpoint.json"
    deadline = time.monotonic() + 240
    while proc.poll() is None and time.monotonic() < deadline:
        fs.invalidate_cache()
        if fs.exists(pointer) and json.loads(fs.cat_file(pointer))["sequence"] >= 2:
            break
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()[1].decode()
    proc.kill()
    proc.communicate()
    fs.invalidate_cache()
    kept = json.loads(fs.cat_file(pointer))
    held = _objects(f"{bucket}/runs/k")
    assert {f"{kept['prefix']}/arrays.npz", f"{kept['prefix']}/state.json"} <= set(held)
    result = run_cli("train", *args[1:], "--resume")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"resuming the run in {run} from its checkpoint: ")
    assert _objects(f"{bucket}/runs/k") == ["curves.png", "history.csv", "model.keras", "run.json"]

"""Training from an ``s3://`` store into an ``s3://`` run folder (real CLI subprocesses, moto on
loopback): the run's files land in the bucket, and a run killed mid-training resumes from its last
uploaded checkpoint in a fresh process."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from s3support import S3Server, make_bucket, s3fs_client, use_server
from scoring_support import run_cli_many
from support import cli_command, cli_env, run_cli

import chunkfit
from chunkfit.synth import SynthSpec, balanced_anomalies, synth

pytestmark = pytest.mark.slow

WINDOW = 16
SAMPLES = 2_000
TRAIN = [
    "--window",
    str(WINDOW),
    "--chunk",
    "64",
    "--batch-size",
    "32",
    "--mix",
    "1",
    "--validation",
    "0.1",
]


@pytest.fixture
def s3_store(bucket: str) -> str:
    url = f"s3://{bucket}/synth.zarr"
    synth(url, SynthSpec(samples=SAMPLES, anomalies=balanced_anomalies(SAMPLES, WINDOW), seed=1))
    return url


@dataclass(frozen=True)
class Trained:
    """A store and a finished run, both on the S3 server, and what training printed."""

    bucket: str
    store: str
    run: str
    result: subprocess.CompletedProcess[str]


@pytest.fixture(scope="module")
def trained_s3(s3_server: S3Server) -> Iterator[Trained]:
    """Train once, for the tests that read the run: an s3 store into an s3 run folder, one epoch."""
    env = use_server(s3_server)
    next(env)
    bucket = make_bucket()
    store = f"s3://{bucket}/synth.zarr"
    synth(store, SynthSpec(samples=SAMPLES, anomalies=balanced_anomalies(SAMPLES, WINDOW), seed=1))
    run = f"s3://{bucket}/runs/a"
    yield Trained(
        bucket, store, run, run_cli("train", store, *TRAIN, "--epochs", "1", "--out", run)
    )
    next(env, None)


def _objects(prefix: str) -> list[str]:
    fs = s3fs_client()
    return sorted(k[len(prefix) + 1 :] for k in fs.find(prefix))


def test_train_from_an_s3_store_into_an_s3_run_folder_writes_the_run_there(
    trained_s3: Trained,
) -> None:
    assert trained_s3.result.returncode == 0, trained_s3.result.stderr
    assert f"run folder {trained_s3.run}:" in trained_s3.result.stdout
    assert _objects(f"{trained_s3.bucket}/runs/a") == [
        "curves.png",
        "history.csv",
        "model.keras",
        "run.json",
    ]
    record = json.loads(s3fs_client().cat_file(f"{trained_s3.bucket}/runs/a/run.json"))
    assert record["finished"] is True and record["store"]["path"] == trained_s3.store


def test_train_from_an_s3_store_into_a_local_run_folder(s3_store: str, tmp_path: Path) -> None:
    result = run_cli("train", s3_store, *TRAIN, "--epochs", "1", "--out", tmp_path / "r")
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == [
        "curves.png",
        "history.csv",
        "model.keras",
        "run.json",
    ]


def test_killed_s3_run_resumes_from_its_uploaded_checkpoint_in_a_fresh_process(
    s3_store: str, bucket: str
) -> None:
    run = f"s3://{bucket}/runs/k"
    args = [
        "train",
        s3_store,
        *TRAIN,
        "--chunk",
        "256",
        "--epochs",
        "2",
        "--checkpoint-every",
        "1",
        "--out",
        run,
    ]
    proc = subprocess.Popen(
        cli_command(*args), env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
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


def test_predict_and_evaluate_with_an_s3_run_store_and_out_match_the_local_predict(
    trained_s3: Trained, tmp_path: Path
) -> None:
    bucket, s3_store, run = trained_s3.bucket, trained_s3.store, trained_s3.run
    assert trained_s3.result.returncode == 0, trained_s3.result.stderr
    local_run = tmp_path / "p"
    s3fs_client().get(f"{bucket}/runs/a", str(local_run), recursive=True)
    local_store = tmp_path / "synth.zarr"
    s3fs_client().get(f"{bucket}/synth.zarr", str(local_store), recursive=True)
    scores = f"s3://{bucket}/scores/s.zarr"
    commands = {
        "s3": ["predict", run, s3_store, "--out", scores],
        "evaluate": ["evaluate", run, s3_store, "--json"],
    }
    results = run_cli_many(commands)
    chunkfit.predict(local_run, local_store, tmp_path / "s.zarr")
    for name, result in results.items():
        assert result.returncode == 0, (name, result.stderr)
    assert results["s3"].stdout.splitlines()[-1].endswith(f"windows into {scores}")
    import zarr

    from chunkfit.store.remote import storage_options

    there = zarr.open_group(scores, mode="r", storage_options=storage_options())
    here = zarr.open_group(str(tmp_path / "s.zarr"), mode="r")
    np.testing.assert_array_equal(there["scores"][:], here["scores"][:])
    assert json.loads(results["evaluate"].stdout)["store"] == s3_store

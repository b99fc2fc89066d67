"""Object-storage faults as one line each: the endpoint going away mid-ingest or mid-training (after
bounded retries, naming the URL and what was kept), access denied, a missing bucket."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from s3support import S3Server, make_bucket, s3fs_client, start_server, use_server
from support import cli_command, cli_env, error_line, free_ports, run_cli, write_csv

from chunkfit.store.transaction import COMMIT_PAUSE_HOOK
from chunkfit.synth import SynthSpec, balanced_anomalies, synth

ROWS = 200_000


@pytest.fixture
def own_server() -> Iterator[S3Server]:
    """A server of this test's own, to stop in the middle of a command."""
    server = start_server()
    env = use_server(server)
    next(env)
    yield server
    server.stop()
    next(env, None)


def _stop_when(
    server: S3Server,
    args: list[str],
    ready: Callable[[], bool],
    pause: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``chunkfit ARGS``; once ``ready()`` holds, stop the server. With ``pause``, a writer
    waits before its commit until the server is stopped (so it cannot finish first on a slow
    machine). The command must then end by itself, its retries spent: one still running long after
    is killed and fails the test."""
    env = {**cli_env(), "CHUNKFIT_S3_RETRIES": "2"}
    if pause is not None:
        env[COMMIT_PAUSE_HOOK] = f"{pause}:120"
    proc = subprocess.Popen(
        cli_command(*args), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline and not ready():
        time.sleep(0.05)
    server.stop()
    if pause is not None:
        pause.unlink(missing_ok=True)
    try:
        out, err = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"chunkfit {' '.join(args)} kept going without its endpoint: it never gave up")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out.decode(), err.decode())


def test_endpoint_gone_mid_ingest_is_one_line_naming_the_url_and_that_no_store_was_created(
    own_server: S3Server, tmp_path: Path
) -> None:
    bucket = make_bucket()
    csv = write_csv(
        tmp_path / "big.csv", np.random.default_rng(0).normal(size=(ROWS, 2)), names=["a", "b"]
    )
    url = f"s3://{bucket}/k.zarr"
    fs = s3fs_client()

    def chunks_written() -> bool:
        fs.invalidate_cache()
        return bool(fs.find(f"{bucket}/k.zarr/signal"))

    # The server stops once chunks are stored, or at the latest when the ingest is about to commit
    # them.
    paused = tmp_path / "paused"
    result = _stop_when(
        own_server,
        ["ingest", url, str(csv), "--rate", "10", "--chunk-samples", "256"],
        lambda: paused.exists() or chunks_written(),
        pause=paused,
    )
    line = error_line(
        result
    )  # the cause in parentheses: the client's words for the connection that failed
    assert re.fullmatch(
        rf"chunkfit: error: {re.escape(url)}: the endpoint {re.escape(own_server.endpoint)} cannot "
        r"be reached after retries \([a-z][^()]*\); no store was created",
        line,
    ), line


def test_endpoint_gone_mid_training_is_one_line_naming_the_url_and_the_kept_checkpoint(
    own_server: S3Server, tmp_path: Path
) -> None:
    bucket = make_bucket()
    store = f"s3://{bucket}/synth.zarr"
    synth(store, SynthSpec(samples=2000, anomalies=balanced_anomalies(2000, 16), seed=1))
    args = [
        "train",
        store,
        "--window",
        "16",
        "--chunk",
        "64",
        "--batch-size",
        "32",
        "--mix",
        "1",
        "--epochs",
        "3",
        "--checkpoint-every",
        "1",
        "--out",
        str(tmp_path / "run"),
    ]
    line = error_line(
        _stop_when(own_server, args, (tmp_path / "run" / "checkpoint" / "state.json").is_file)
    )
    assert line.startswith(
        f"chunkfit: error: {store}: the endpoint {own_server.endpoint} cannot be reached after "
        "retries ("
    )
    assert "; the store is unchanged; the checkpoint made " in line
    assert line.endswith(f"is intact in {tmp_path / 'run'}")


def test_missing_bucket_is_one_line(bucket: str) -> None:
    assert error_line(run_cli("info", "s3://no-such-bucket-here/s.zarr")) == (
        "chunkfit: error: s3://no-such-bucket-here/s.zarr: bucket 'no-such-bucket-here' does not "
        f"exist at {os.environ['AWS_ENDPOINT_URL']}; create it or check the URL"
    )


def test_access_denied_is_one_line() -> None:
    server = start_server(authenticate=True)
    try:
        env = use_server(server)
        next(env)
        result = run_cli("info", "s3://bkt/s.zarr")
        next(env, None)
    finally:
        server.stop()
    assert error_line(result) == (
        f"chunkfit: error: s3://bkt/s.zarr: access denied by {server.endpoint}; check the "
        "credentials (AWS_PROFILE or AWS_ACCESS_KEY_ID) and the bucket policy (nothing was read)"
    )


@pytest.fixture
def cut_short() -> Iterator[str]:
    """An endpoint on loopback that answers every request with headers promising a body, then hangs
    up: a server gone in the middle of a response, every time."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", free_ports(1)[0]))
    listener.listen()
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(5)
                try:
                    conn.recv(65536)
                    conn.sendall(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 4061\r\n"
                        b"Content-Type: application/json\r\n\r\n{"
                    )
                except OSError:
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    thread.join()
    listener.close()


def test_a_response_cut_short_is_one_line_naming_the_url(cut_short: str) -> None:
    env = {
        **cli_env(),
        "AWS_ENDPOINT_URL": cut_short,
        "AWS_ENDPOINT_URL_S3": cut_short,
        "CHUNKFIT_S3_RETRIES": "1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    result = subprocess.run(
        cli_command("info", "s3://bkt/s.zarr"),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert error_line(result).startswith(
        f"chunkfit: error: s3://bkt/s.zarr: the endpoint {cut_short} cannot be reached after "
        "retries ("
    )

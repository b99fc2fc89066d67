"""A real S3-protocol server on loopback for the object-storage tests: moto's standalone server,
started as a subprocess on a free port and stopped by the tests themselves (no network, no
account)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from support import free_ports

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@dataclass
class S3Server:
    """A running moto server: its endpoint, and the environment that points clients at it."""

    port: int
    process: subprocess.Popen[bytes]

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        return {**CREDENTIALS, "AWS_ENDPOINT_URL": self.endpoint}

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_server(
    port: int | None = None,
    *,
    authenticate: bool = False,
    command: list[str] | None = None,
    cores: set[int] | None = None,
) -> S3Server:
    """Start ``python -m moto.server`` on ``port`` (a free one by default) and wait until it
    answers.

    ``authenticate``: the server checks credentials (moto's IAM), so the test keys are denied.
    ``command``: what Python runs instead (its arguments after the interpreter; it must serve on
    ``port``). ``cores``: the server runs on these cores only.
    """
    port = port or free_ports(1)[0]
    env = {**os.environ, **({"INITIAL_NO_AUTH_ACTION_COUNT": "0"} if authenticate else {})}
    proc = subprocess.Popen(
        [sys.executable, *(command or ["-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)])],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    if (
        cores is not None
    ):  # before its imports are done, so before it starts its threads (they inherit it)
        os.sched_setaffinity(proc.pid, cores)
    server = S3Server(port, proc)
    deadline = time.monotonic() + 30
    import urllib.error
    import urllib.request

    while True:
        try:
            urllib.request.urlopen(server.endpoint + "/", timeout=1).close()
            return server
        except urllib.error.HTTPError:
            return server  # it answers, with a refusal
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                server.stop()
                raise RuntimeError(f"moto server on port {port} did not start") from None
            time.sleep(0.1)


def use_server(server: S3Server) -> Iterator[None]:
    """Point this process's S3 clients at ``server`` (the environment botocore reads)."""
    saved = {k: os.environ.get(k) for k in server.env()}
    os.environ.update(server.env())
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def make_bucket() -> str:
    """A new, empty bucket on the current server: one per test, so tests share nothing."""
    import s3fs

    name = f"t-{uuid.uuid4().hex[:12]}"
    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    fs.mkdir(name)
    return name


def s3fs_client() -> Any:
    import s3fs

    return s3fs.S3FileSystem(skip_instance_cache=True)

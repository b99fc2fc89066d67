"""A training process caps glibc's malloc arenas at one per core (chunkfit.train.malloc): counted in
real processes from glibc's own report (``malloc_info``), against the same process uncapped."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support import REPO, make_store

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="glibc's arenas: Linux only"
)

# Prints how many malloc arenas (glibc's "heaps") the process has after its threads allocated.
ARENAS = """
import ctypes, os, re, tempfile
libc = ctypes.CDLL("libc.so.6")
libc.fopen.restype = ctypes.c_void_p
libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
libc.fclose.argtypes = [ctypes.c_void_p]
def arenas():
    with tempfile.NamedTemporaryFile(suffix=".xml") as f:
        fp = libc.fopen(f.name.encode(), b"w")
        libc.malloc_info(0, fp)
        libc.fclose(fp)
        return len(re.findall(r'<heap nr="', open(f.name).read()))
"""

THREADS = (
    ARENAS
    + """
import sys, threading
import numpy as np
from chunkfit.train.malloc import cap_arenas
print("capped", cap_arenas(int(sys.argv[1])) if sys.argv[1] != "-" else False)
together = threading.Barrier(12)
def work():
    together.wait()  # all alive at once: an exited thread's arena would go to the next one
    kept = [np.empty(1000) for _ in range(200)]  # 8 KB each: from the thread's malloc arena
    together.wait()
go = [threading.Thread(target=work) for _ in range(12)]
for t in go: t.start()
for t in go: t.join()
print("arenas", arenas())
"""
)


def _run(code: str, *args: str, env: dict[str, str] | None = None) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    out = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env={**base, **(env or {}), "PYTHONPATH": str(REPO)},
        check=True,
    )
    return dict(
        line.split(" ", 1)
        for line in out.stdout.splitlines()
        if re.match(r"^(capped|arenas) ", line)
    )


def test_cap_holds_a_threaded_process_to_that_many_arenas_uncapped_one_per_thread() -> None:
    uncapped = _run(THREADS, "-")
    capped = _run(THREADS, "2")
    assert capped["capped"] == "True"
    assert int(uncapped["arenas"]) >= 8  # glibc's default allows 8 per core: one per thread here
    assert int(capped["arenas"]) <= 2


def test_a_users_malloc_arena_max_is_left_as_it_is() -> None:
    chosen = _run(THREADS, "1", env={"MALLOC_ARENA_MAX": "4"})
    assert chosen["capped"] == "False"
    assert int(chosen["arenas"]) == 4


def test_a_training_run_holds_its_threads_to_one_arena_per_core(tmp_path: Path) -> None:
    signal = np.sin(np.arange(6000) / 7.0)[:, None].astype(np.float32)
    store = make_store(tmp_path / "s.zarr", signal, events=list(range(100, 6000, 450)), chunk=1024)
    code = (
        ARENAS
        + f"""
import os, chunkfit
chunkfit.fit("baseline-cnn", {str(store)!r}, window=104, chunk=2000, epochs=1, validation=0.2)
print("arenas", arenas())
print("capped", len(os.sched_getaffinity(0)))
"""
    )
    trained = _run(code)
    free = _run(code, env={"MALLOC_ARENA_MAX": "64"})  # the user's choice: left uncapped
    assert int(trained["arenas"]) <= int(
        trained["capped"]
    )  # one per core (the main arena among them)
    assert int(free["arenas"]) > int(trained["capped"])

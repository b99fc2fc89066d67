"""moto's S3 server on two loopback ports over one in-memory S3, for benchmarks/storage.py.

    python benchmarks/delayed_s3.py PORT DELAYED_PORT [--delay-ms 20]

PORT answers each request at once; DELAYED_PORT holds each request ``--delay-ms`` before handling
it, as a far endpoint's round trip would, and counts them (``GET /_round_trips`` on it answers the
count so far, and is not counted). Both see the same buckets and objects.

The wait happens inside the server, a sleeping thread per request: no CPU, and no second hop over
loopback. A proxy in front of the server did the same job, but on shared cores its threads and the
extra copy of every byte through loopback took CPU from the client, which a far endpoint does not.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import make_server

App = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def delaying(app: App, seconds: float) -> App:
    """``app`` with each request held ``seconds`` first, and their count at ``/_round_trips``."""
    count = [0]
    lock = threading.Lock()

    def wrapped(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == "/_round_trips":
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [str(count[0]).encode()]
        with lock:
            count[0] += 1
        time.sleep(seconds)
        return app(environ, start_response)

    return wrapped


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("port", type=int)
    ap.add_argument("delayed_port", type=int)
    ap.add_argument("--delay-ms", type=float, default=20.0)
    opts = ap.parse_args()
    app = DomainDispatcherApplication(create_backend_app)
    direct = make_server(
        "127.0.0.1", opts.port, app, threaded=True, request_handler=MotoRequestHandler
    )
    slow = make_server(
        "127.0.0.1",
        opts.delayed_port,
        delaying(app, opts.delay_ms / 1000),
        threaded=True,
        request_handler=MotoRequestHandler,
    )
    threading.Thread(target=slow.serve_forever, daemon=True).start()
    direct.serve_forever()


if __name__ == "__main__":
    main()

"""The distributed rendezvous: the workers of a run check each other and agree on its checkpoint.

Every worker starts from the same checkpoint: the chief's, which the others read (from a shared file
system, or through an s3 run's pointer) after the chief settled it and before it can write another.
In one process there is no one to meet, and the checkpoint is the run folder's own.
"""

from __future__ import annotations

from typing import Any

from .engines import Engine
from .runfolder import PeerFolder, RunFolder


def meet(
    engine: Engine, identity: dict[str, Any], folder: RunFolder | None, peer: PeerFolder | None
) -> Any:
    """The workers check each other (``Engine.rendezvous``); returns the checkpoint this worker
    resumes from: the chief's, read by every other worker."""
    if folder is not None:
        return engine.rendezvous(
            identity,
            folder.shown,
            lambda: folder.checkpoint,
            write=folder.write_probe,
            remove=folder.remove_probe,
        )
    return engine.rendezvous(
        identity,
        peer.shown if peer is not None else None,
        peer.latest if peer is not None else lambda: None,
        read=peer.read_probe if peer is not None else None,
    )

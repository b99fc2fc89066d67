"""The distributed rendezvous: the workers of a run check each other and agree on its checkpoint.

Every worker starts from the same checkpoint: the chief's, which the others read (from a shared file
system, or through an s3 run's pointer) after the chief settled it and before it can write another.
"""

from __future__ import annotations

from typing import Any

from ..errors import RunError
from .runfolder import PeerFolder, RunFolder


def meet(
    engine: Any, identity: dict[str, Any], folder: RunFolder | None, peer: PeerFolder | None
) -> Any:
    """The workers check each other (chunkfit.train.tensorflow.distributed); returns the checkpoint
    this worker resumes from: the chief's, read by every other worker (from a shared file system, or
    through an s3 run's pointer) after the chief settled it and before it can write another."""
    if folder is not None:
        where: str | None = folder.shown
        engine.meet(identity, where, write=folder.write_probe, remove=folder.remove_probe)
        resumed = folder.checkpoint
    else:
        where = peer.shown if peer is not None else None
        engine.meet(identity, where, read=peer.read_probe if peer is not None else None)
        resumed = peer.latest() if peer is not None else None
    if engine.cluster is not None:
        sequence = engine.exchange([resumed.sequence if resumed is not None else -1])
        if int(sequence[engine.cluster.rank][0]) != int(sequence[0][0]):
            raise RunError(
                f"{where}: this worker found another checkpoint in the run folder than the chief; "
                "give every worker the same --out on storage they all reach"
            )
    return resumed

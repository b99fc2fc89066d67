"""Scoring: a trained run's model streamed over a store, block by block.

- ``runs``: a run folder or ``.keras`` file, its window settings and labels, checked cheaply;
- ``scorer``: every window of a store scored in fixed-size batches, block by block;
- ``metrics``: streaming window-level figures; ``detect``: runs of positive windows as detections;
- ``threshold``: the decision threshold a run chooses on its validation split;
- ``evaluate``: ``chunkfit evaluate``; ``predict`` and ``outputs``: ``chunkfit predict`` and what it writes.
- ``follow``: ``chunkfit predict --follow``, a growing store scored as its samples are committed.
"""

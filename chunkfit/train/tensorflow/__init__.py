"""The TensorFlow engine: what differs when Keras runs on TensorFlow.

``engine.TensorFlowEngine`` is what the training loop (chunkfit.train.loop) drives, through the
``Engine`` protocol of chunkfit.train.engines: start TensorFlow and build the model, turn a block
into the engine's tensors and dataset (``pipeline``), train or evaluate one group of blocks
(``stepper``: several batches per compiled call; ``fused``, ``halves``), the compute threads
(``threads``; measured per machine and model before TensorFlow starts: ``threadtune``, its
children in ``threadprobe``), and whether the step runs under XLA (``autotune``, timed in the
run). ``predictor`` scores blocks of windows; ``options`` refuses what this engine cannot do.

Several workers or devices: ``distributed.DistributedEngine`` with the workers' collective
(``workers``) and the replicas' step (``replicastep``); ``cluster`` parses TF_CONFIG and splits
global batches without TensorFlow. Nothing here decides what is trained or when. This package
imports nothing of chunkfit.train.jax.
"""

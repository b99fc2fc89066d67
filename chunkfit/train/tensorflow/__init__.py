"""The TensorFlow engine: what differs when Keras runs on TensorFlow.

``engine.TensorFlowEngine`` is the interface the training loop (chunkfit.train.loop) drives: start
TensorFlow and build the model, turn a block into the engine's tensors and dataset
(``pipeline``), train or evaluate one group of blocks (``stepper``: several batches per compiled
call), the compute threads (``threads``; measured per machine and model before TensorFlow starts:
``threadtune``), and whether the step runs under XLA (``autotune``, timed in the run). Nothing
here decides what is trained or when.
"""

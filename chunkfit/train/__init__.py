"""Training: windows of a store, cut into blocks, trained by ``model.fit`` block by block.

The modules, in the order data flows through them:

- ``windows``: pure window, label and split arithmetic;
- ``blocks``: blocks of consecutive windows, seeded block and window orders, one read per block;
- ``plan``: a run's split and blocks, and each epoch's groups of blocks;
- ``budget``: ``--memory-budget`` turned into a block size;
- ``normalize``: inputs in any units (standardisation from the training split, saved in the model);
- ``weights``: class weights for rare events;
- ``models``: the built-in models, ``.keras`` files and ``module:function``;
- ``backend``: which Keras backend, hence which engine, the process runs;
- ``tensorflow/``: the default engine (threads, input pipeline, the multi-batch ``Stepper``);
- ``jax/``: the engine on the JAX backend (one jitted step per batch, gather inside);
- ``callbacks``: the run's callbacks across block-wise ``fit`` calls;
- ``loop``: ``chunkfit.fit``, the epoch loop;
- ``progress``: progress reports; ``record``: run.json;
- ``runfolder``: the run folder and its lock; ``checkpoint``: checkpoints on disk;
  ``keras_state``: what Keras state a checkpoint captures; ``resume``: checkpointing and resuming.

Importing this package loads no TensorFlow.
"""

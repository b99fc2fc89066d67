"""What training and scoring both stand on: windows, labels, blocks, the scoring loop, the figures.

- ``windows``: window and label arithmetic over sample indices, and the train/validation split;
- ``labels``: the class of every window of a store under a label rule (``Labeller``), counted;
- ``blocks``: runs of consecutive windows read with one contiguous store read, and their orders;
- ``plan``: what a run trains: its split, blocks and each epoch's groups of blocks;
- ``scoring``: every window of a store scored block by block by a compiled predictor;
- ``metrics``: streaming window-level figures; ``detect``: runs of positive windows as detections;
- ``matching``: detections paired one to one with event markers within a tolerance; ``events``:
  window scores to detections to those pairs, and the event figures; ``threshold``: the decision
  threshold a run chooses on its validation split.

Nothing here imports an engine, Keras or TensorFlow: a predictor comes in as an argument.
"""

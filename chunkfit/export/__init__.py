"""Take a trained run to a device: LiteRT, ONNX and SavedModel files, the run's settings beside
them."""

"""chunkfit's shuffled window blocks for any training loop (bring your own loop)."""

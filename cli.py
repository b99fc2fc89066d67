"""``python cli.py ARGS`` from a checkout does exactly what ``chunkfit ARGS`` does."""

from chunkfit.cli import main

if __name__ == "__main__":
    main()

from chunkfit.cli import main

main()

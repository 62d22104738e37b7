"""`python -m whale.cli`."""

from whale.cli.main import main

main()

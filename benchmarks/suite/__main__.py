"""`python -m benchmarks.suite`."""

from benchmarks.suite.cli import main

main()

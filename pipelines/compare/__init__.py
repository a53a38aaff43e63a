"""Comparison across runs: seeds aggregated, runs read from git revisions, the
compare page, plots and the regression check."""

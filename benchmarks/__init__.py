"""Benchmarks of rlcore: throughput, time-to-solve and update memory (see README.md)."""

"""Benchmarks: numbers printed by scripts, recorded in BENCHMARKS.md; never timed unit tests."""

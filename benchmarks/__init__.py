"""Benchmarks for dispatcher: the harness (`dispatcher bench`, `python -m benchmarks`)
and a minimal uvloop HTTP receiver (`python -m benchmarks.receiver`)."""

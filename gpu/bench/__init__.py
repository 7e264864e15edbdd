"""Benchmark harness (:mod:`.harness`, kernel-agnostic) and mactile's GPU benchmarks."""

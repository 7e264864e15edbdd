"""Measured crossover tables of mactile.gpu.linear (one JSON file per device kind)."""

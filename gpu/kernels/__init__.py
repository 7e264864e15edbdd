"""FP4 kernel templates (.cu/.cuh), shipped as package data."""

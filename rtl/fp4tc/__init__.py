"""NVFP4 and RaZeR tensor cores (RaZeR Sec. 4.4, Fig. 4, Table 9) from one generator.

* :mod:`.decoders`: FP4 element decoders (plain E2M1, RaZeR weights with two offset
  registers, RaZeR activations with one) and the block-scale decoder.
* :mod:`.fp32add`: an IEEE binary32 adder (RNE, subnormals, Inf/NaN) for the accumulators.
* :mod:`.tensorcore`: the rows x cols array with per-row accumulators (row dot products).
* :mod:`.outer`: the output-stationary rows x cols array of MAC units, each with its own
  accumulator (the reading of Sec. 4.4 that Table 9's area supports).
* :mod:`.stages`: the datapath stages both organisations build their outputs from.

Every width and table derives from :mod:`mactile.golden.tensorcore`, the bit-exact model.
"""

"""BlockDialect's DialectFP4 activation path (001_eabebf91b09c2719.txt Sec. 3.2-3.3, 4.3).

* :class:`~.quantizer.DialectQuantizer` (``dialect-quantizer``): FP16 block -> shared
  exponent, dialect id by the two-stage procedure, 4-bit codes (Table 6, 5 cycles).
* :class:`~.dequantizer.DialectDequantizer` (``dialect-dequantizer``): codes + dialect id
  -> 5-bit sign-magnitude integers (Table 6, 1 cycle).
* :class:`~.mse.DialectMseSelector` (``dialect-mse-selector``): the same interface with
  the dialect chosen by fixed-point MSE (Table 7's comparison point, 8 cycles).
* :class:`~.chain.DialectChain` (``dialect-chain``): quantizer -> dequantizer ->
  ``mac-dialectfp4-decode``, a verification composite.
* :mod:`.logic`: range checks as derived sum-of-products logic (Figure 5c), pure Python.

Docs: docs/rtl-dialect.md. Only :mod:`.logic` imports without Amaranth.
"""

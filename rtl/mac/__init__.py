"""Multiply-accumulate units of BlockDialect Table 5 (INT4/5/8, FP4, FP6 E2M3/E3M2,
DialectFP4 "Ours" and "Ours-INT4"), generated from :mod:`mactile.golden.mac`.

:class:`MacUnit` (in :mod:`.unit`) imports Amaranth; :mod:`.presets` does not.
"""

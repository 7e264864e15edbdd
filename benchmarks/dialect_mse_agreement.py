"""How often the fixed-point MSE selector (golden/dialect_mse.py) picks the dialect that
exact floating-point MSE picks, and the quantization error each selection gives, for a
grid of widths (F fraction bits of the magnitude, G of each squared error) and several
activation-like distributions. Prints a Markdown table (docs/rtl-dialect.md quotes it).

Usage: python benchmarks/dialect_mse_agreement.py [--blocks N] [--seed S]
"""
from __future__ import annotations

import argparse
import datetime
import platform

import numpy as np

from mactile.golden.dialect import (FORMATBOOK, SE_BIAS, preprocess, quantize_index,
                                    select_mse, select_two_stage)
from mactile.golden.dialect_mse import MseFixedPoint, quantize_fixed_mse

WIDTHS = [(4, 4), (6, 4), (6, 6), (6, 12), (8, 8), (8, 16)]


def distributions(rng, n, b=32):
    return {
        "normal": rng.standard_normal((n, b)),
        "laplace": rng.laplace(size=(n, b)),
        "uniform": rng.uniform(-1, 1, (n, b)),
        "student-t3": rng.standard_t(3, (n, b)),
        "normal+outlier": np.where(rng.random((n, b)) < 0.02, 20.0, 1.0) * rng.standard_normal((n, b)),
    }


def sq_error(x16, se, dialect):
    scaled = np.ldexp(np.abs(x16.astype(np.float64)), -(np.maximum(se, 1) - SE_BIAS)[:, None])
    idx = quantize_index(scaled, dialect, unit=1)
    return float(((scaled - 0.5 * FORMATBOOK[dialect[:, None], idx]) ** 2).sum())


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    print(f"# fixed-point MSE vs exact MSE, {args.blocks} blocks of 32 per distribution, "
          f"seed {args.seed}; {datetime.date.today()} numpy {np.__version__} "
          f"python {platform.python_version()}\n")
    head = "| distribution | two-stage | " + " | ".join(f"F={f} G={g}" for f, g in WIDTHS) + " |"
    print("Agreement with exact MSE (share of blocks; squared error relative to exact MSE in "
          "brackets)\n")
    print(head)
    print("|" + " --- |" * (2 + len(WIDTHS)))
    for name, x in distributions(rng, args.blocks).items():
        x16 = x.astype(np.float16)
        se, mt, _ = preprocess(x16)
        scaled = np.ldexp(np.abs(x16.astype(np.float64)), -(np.maximum(se, 1) - SE_BIAS)[:, None])
        exact = select_mse(scaled)
        e_exact = sq_error(x16, se, exact)
        two = select_two_stage(mt)
        cells = [f"{(two == exact).mean():.4f} ({sq_error(x16, se, two) / e_exact:.4f})"]
        for f, g in WIDTHS:
            d = quantize_fixed_mse(x16, MseFixedPoint(frac_bits=f, err_frac_bits=g))[1]
            cells.append(f"{(d == exact).mean():.4f} ({sq_error(x16, se, d) / e_exact:.5f})")
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()

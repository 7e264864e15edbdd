"""How often mactile's dequantized output equals torchao's and microxcaling's bit for bit.

Reads the vectors the peers made (``tests/data/interop/*.npz``, written by
``tests/data/interop/peer_vectors.py``) and quantizes the same inputs with mactile: once
with the default (``ocp``) convention, once with the convention that names the peer's
choices (``--convention`` of ``mactile quantize``). Prints a Markdown table: per peer
configuration, the share of elements whose float64 value (sign of zero included) equals
the peer's, and for torchao also the share of FP4 codes and of scale bytes that equal its
stored ones. With ``-o DIR`` it also writes ``peer_agreement.json`` and ``.md`` there.

Usage: python benchmarks/peer_agreement.py [-o docs/results/interop] [--default-only]
"""
from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
VECTORS = ROOT / "tests" / "data" / "interop"


def _load(name):
    spec = importlib.util.spec_from_file_location(name, VECTORS / f"{name}.py")
    mod = sys.modules[name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def same_bits(ours: np.ndarray, theirs: np.ndarray) -> np.ndarray:
    """Elementwise: equal float64 bit patterns (so -0 differs from +0, NaN from numbers)."""
    a = np.ascontiguousarray(ours, dtype=np.float64).view(np.uint64)
    b = np.ascontiguousarray(theirs, dtype=np.float64).view(np.uint64)
    return a == b


def load_vectors(path: Path):
    """(meta dict, inputs by case, {config: {case: (y, codes or None, scales or None)}})."""
    with np.load(path) as z:
        meta = json.loads(str(z["meta"]))
        xs = {c: z[f"x.{c}"] for c in meta["cases"]}
        out = {}
        for cfg in meta["configs"]:
            out[cfg] = {c: (z[f"y.{cfg}.{c}"],
                            z[f"codes.{cfg}.{c}"] if f"codes.{cfg}.{c}" in z else None,
                            z[f"scales.{cfg}.{c}"] if f"scales.{cfg}.{c}" in z else None)
                        for c in meta["cases"]}
    return meta, xs, out


def agreement(fmt, xs, peer, bugs=None) -> dict:
    """Shares of equal elements / codes / scale bytes of ``fmt`` against one configuration;
    with ``bugs`` (``peer_bugs.explained`` for it) also among the elements no named peer
    bug touches."""
    n = eq = n_codes = eq_codes = n_sc = eq_sc = n_clean = eq_clean = 0
    for case, x in xs.items():
        y, codes, scales = peer[case]
        q = fmt.quantize(x)
        mine = q.dequantize()
        hit = same_bits(mine, y)
        eq += int(hit.sum())
        n += y.size
        if bugs is not None:
            clean = ~bugs(x, q)
            n_clean += int(clean.sum())
            eq_clean += int(hit[clean].sum())
        if codes is not None:
            eq_codes += int((q.codes.reshape(codes.shape) == codes).sum())
            n_codes += codes.size
            eq_sc += int((q.scales.reshape(scales.shape) == scales).sum())
            n_sc += scales.size
    res = {"elements": n, "values": eq / n}
    if bugs is not None:
        res["values_outside_peer_bugs"] = eq_clean / n_clean
        res["elements_touched_by_peer_bugs"] = n - n_clean
    if n_codes:
        res["codes"] = eq_codes / n_codes
        res["scales"] = eq_sc / n_sc
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--out", help="folder for peer_agreement.json and .md")
    ap.add_argument("--default-only", action="store_true",
                    help="only the default convention (for code that has no conventions)")
    args = ap.parse_args(argv)
    from mactile.golden import get_format

    pv = _load("peer_vectors")
    pb = None if args.default_only else _load("peer_bugs")
    rows, table = [], []
    for file in ("torchao.npz", "microxcaling.npz"):
        path = VECTORS / file
        if not path.exists():
            print(f"note: {path} missing, skipped", file=sys.stderr)
            continue
        meta, xs, peers = load_vectors(path)
        for cfg, peer in peers.items():
            fmt_name, convention, overrides = pv.MACTILE[cfg]
            row = {"peer": f"{meta['peer']} {meta['version']}", "config": cfg,
                   "call": meta["configs"][cfg]["call"], "format": fmt_name,
                   "default": agreement(get_format(fmt_name), xs, peer)}
            if not args.default_only:
                spec = get_format(fmt_name, convention=convention, **overrides)
                row["convention"] = spec.describe()
                row["with_convention"] = agreement(
                    spec, xs, peer, lambda x, q, cfg=cfg: pb.explained(cfg, x, q))
            rows.append(row)

    def pct(r, k):
        return f"{100 * r[k]:.2f}%" if k in r else "-"

    head = ("| peer configuration | mactile format | default: values | codes | scales |"
            + ("" if args.default_only else " mactile convention | values | codes | scales | "
                                            "values outside named peer bugs (elements they touch) |"))
    table += [head, "|" + " --- |" * (head.count("|") - 1)]
    for r in rows:
        cells = [r["config"], r["format"], pct(r["default"], "values"), pct(r["default"], "codes"),
                 pct(r["default"], "scales")]
        if not args.default_only:
            w = r["with_convention"]
            cells += [f"`{r['convention']}`", pct(w, "values"), pct(w, "codes"), pct(w, "scales"),
                      f"{pct(w, 'values_outside_peer_bugs')} ({w['elements_touched_by_peer_bugs']})"]
        table.append("| " + " | ".join(cells) + " |")
    n = rows[0]["default"]["elements"] if rows else 0
    title = (f"Bit-equal share of dequantized values (and of torchao's stored FP4 codes and "
             f"scale bytes), {n} elements per configuration; {datetime.date.today()}, "
             f"numpy {np.__version__}")
    print(title + "\n\n" + "\n".join(table))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "peer_agreement.json").write_text(json.dumps({"title": title, "rows": rows}, indent=1) + "\n")
        (out / "peer_agreement.md").write_text(title + "\n\n" + "\n".join(table) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

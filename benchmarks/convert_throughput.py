"""Throughput and peak memory of ``mactile convert`` on a synthetic NVFP4 checkpoint.

Writes a compressed-tensors ``nvfp4-pack-quantized`` checkpoint of about ``--size-mb``
(``--layers`` weights of ``--rows x --cols``, random FP4 codes, E4M3 block scales around
2**-2..2**2, a global scale; sharded at ``--shard-mb`` with its index JSON), then runs
``mactile convert IN OUT --to FORMAT`` once per format as a subprocess and records its
wall time, MB/s (checkpoint bytes read per second) and peak RSS (the child's
``ru_maxrss``), next to the largest tensor's size; ``--golden FORMAT ...`` also runs those
formats with ``convert --golden`` (the golden NumPy models only, the reference path). Prints
the figures and, with ``--out``, writes them as JSON and Markdown.

    python benchmarks/convert_throughput.py --size-mb 1024 --to nvfp4 mxfp4 razer \\
        --golden nvfp4 --out docs/results/convert_throughput
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def make_checkpoint(folder: Path, *, layers: int, rows: int, cols: int, shard_mb: float,
                    seed: int = 0) -> dict:
    from mactile.golden import checkpoints as C

    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True)
    per_layer = rows * cols // 2 + rows * cols // 16 + 4
    per_shard = max(1, int(shard_mb * 1e6 // per_layer))
    n_shards = -(-layers // per_shard)
    weight_map, total = {}, 0
    for s in range(n_shards):
        name = f"model-{s + 1:05d}-of-{n_shards:05d}.safetensors"
        tensors = []
        for i in range(s * per_shard, min(layers, (s + 1) * per_shard)):
            base = f"model.layers.{i}.mlp.proj"
            lseed = int(rng.integers(1 << 31))

            def codes(lseed=lseed):
                return np.random.default_rng(lseed).integers(0, 256, (rows, cols // 2), dtype=np.uint8)

            def scales(lseed=lseed):  # E4M3 codes 0x28..0x48: 2**-2 .. 2**2
                return np.random.default_rng(lseed + 1).integers(0x28, 0x48, (rows, cols // 16),
                                                                 dtype=np.uint8)

            tensors += [(f"{base}.weight_packed", "U8", (rows, cols // 2), codes),
                        (f"{base}.weight_scale", "F8_E4M3", (rows, cols // 16), scales),
                        (f"{base}.weight_global_scale", "F32", (1,),
                         lambda: np.array([2688.0 / 0.5], dtype="<f4"))]
        C.write_safetensors(folder / name, tensors, {"format": "pt"})
        for t in tensors:
            weight_map[t[0]] = name
        total += (folder / name).stat().st_size
    (folder / C.INDEX_NAME).write_text(json.dumps(
        {"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2, sort_keys=True) + "\n")
    (folder / "config.json").write_text(json.dumps({"quantization_config": {
        "quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized"}}) + "\n")
    return {"bytes": sum(p.stat().st_size for p in folder.iterdir()), "layers": layers,
            "shape": [rows, cols], "shards": n_shards,
            "largest_tensor_bytes": rows * cols // 2, "layer_elements": rows * cols}


def run_convert(src: Path, out: Path, to: str, golden: bool = False) -> dict:
    """One ``mactile convert`` child: its wall time, and its own CPU time and peak RSS
    (``os.wait4`` of that child, not the running maximum over every child)."""
    cmd = [sys.executable, "-m", "mactile", "convert", str(src), str(out), "--to", to,
           "--quiet"] + (["--golden"] if golden else [])
    with tempfile.TemporaryFile("w+") as so, tempfile.TemporaryFile("w+") as se:
        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=so, stderr=se, text=True)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        so.seek(0)
        se.seek(0)
        stdout, stderr = so.read(), se.read()
    if p.returncode != 0:
        raise SystemExit(f"convert failed ({p.returncode}): {stderr.strip()}")
    return {"to": to + (" --golden" if golden else ""), "wall_s": round(wall, 3),
            "cpu_s": round(ru.ru_utime + ru.ru_stime, 3),
            "peak_rss_mib": round(ru.ru_maxrss / 1024, 1),  # KiB on Linux
            "loadavg_start": round(load, 2),
            "summary": stdout.strip().splitlines()}


def render(res: dict) -> str:
    """The Markdown table of a result (also from a saved JSON: ``--render FILE.json``)."""
    info, m = res["checkpoint"], res["machine"]
    lines = ["# `mactile convert` throughput", "",
             f"Synthetic compressed-tensors NVFP4 checkpoint: {info['layers']} layers of "
             f"{info['shape'][0]} x {info['shape'][1]}, {info['bytes'] / 1e6:.0f} MB in "
             f"{info['shards']} shards; {m['cpus']} CPUs, load average at start "
             f"{m['loadavg_start'][0]:.1f} (other jobs shared the cores: CPU s is the time "
             f"convert itself got, its peak RSS its own). Written by benchmarks/convert_throughput.py on {res['date']}.", "",
             "| --to | wall s | MB/s (wall) | CPU s | MB per CPU s | peak RSS MiB | largest tensor MiB "
             "| load at its start |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in res["runs"]:
        load = r.get("loadavg_start")
        lines.append(f"| {r['to']} | {r['wall_s']:.1f} | {r['mb_per_s']:.1f} | {r['cpu_s']:.1f} "
                     f"| {info['bytes'] / 1e6 / r['cpu_s']:.1f} | {r['peak_rss_mib']:.0f} "
                     f"| {info['largest_tensor_bytes'] / 2**20:.0f} "
                     f"| {'' if load is None else f'{load:.1f}'} |")
    return "\n".join(lines) + "\n"


def write_results(res: dict, out: str) -> None:
    from mactile.golden.fileio import atomic_write

    atomic_write(out + ".json", json.dumps(res, indent=2) + "\n")
    atomic_write(out + ".md", render(res))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=float, default=1024.0)
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--shard-mb", type=float, default=500.0)
    ap.add_argument("--to", nargs="+", default=["nvfp4"])
    ap.add_argument("--golden", nargs="*", default=[], metavar="FORMAT",
                    help="formats also converted with --golden (the reference path)")
    ap.add_argument("--workdir", help="where the checkpoints go (default: a temporary folder)")
    ap.add_argument("--out", help="write OUT.json and OUT.md")
    ap.add_argument("--render", metavar="FILE.json", help="only rewrite FILE.md from a saved result")
    args = ap.parse_args(argv)
    if args.render:
        write_results(json.loads(Path(args.render).read_text()), args.render[: -len(".json")])
        return 0
    load_start = os.getloadavg()
    per_layer = args.rows * args.cols * (0.5 + 1 / 16)
    layers = max(1, round(args.size_mb * 1e6 / per_layer))
    work = Path(args.workdir or tempfile.mkdtemp(prefix="mactile-convert-bench-"))
    try:
        src = work / "in"
        t0 = time.perf_counter()
        info = make_checkpoint(src, layers=layers, rows=args.rows, cols=args.cols,
                               shard_mb=args.shard_mb)
        info["write_s"] = round(time.perf_counter() - t0, 2)
        runs = []
        for to, golden in [(t, False) for t in args.to] + [(t, True) for t in args.golden]:
            out = work / f"out-{to}{'-golden' if golden else ''}"
            r = run_convert(src, out, to, golden)
            r["mb_per_s"] = round(info["bytes"] / 1e6 / r["wall_s"], 2)
            r["output_bytes"] = sum(p.stat().st_size for p in out.iterdir())
            runs.append(r)
            print(f"convert --to {r['to']}: {info['bytes'] / 1e6:.0f} MB in {r['wall_s']:.1f} s = "
                  f"{r['mb_per_s']:.1f} MB/s, peak RSS {r['peak_rss_mib']:.0f} MiB "
                  f"(largest tensor {info['largest_tensor_bytes'] / 2**20:.0f} MiB)", flush=True)
            shutil.rmtree(out)
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    res = {"benchmark": "convert_throughput", "checkpoint": info, "runs": runs,
           "machine": {"cpus": os.cpu_count(), "loadavg_start": load_start,
                       "python": platform.python_version(), "numpy": np.__version__,
                       "MACTILE_THREADS": os.environ.get("MACTILE_THREADS")},
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if args.out:
        write_results(res, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

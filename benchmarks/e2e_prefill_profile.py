"""Where an eager prefill of the decoder spends its time, per weight format (GPU).

For each format (FP16 and the mactile formats named), a Llama-3.1-8B-shaped decoder with
random weights (``--layers`` of them; layer 0 quantized and copied), one prompt of
``--length`` tokens after a warm-up: the wall time of the forward, the sum of its CUDA
kernels' times (torch.profiler) and the ten costliest kernels. Wall time much above the
kernel sum is host time (Python, launches); a kernel family far above FP16's is the device.

Usage (on the GPU): ``python benchmarks/e2e_prefill_profile.py -o OUT [--formats nvfp4,razer-g128]
[--length 2048] [--layers 32]``; writes ``prefill_profile.json`` and prints a table.
"""
from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--out", required=True, type=Path)
    ap.add_argument("--formats", default="nvfp4,razer-g128")
    ap.add_argument("--length", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=32)
    args = ap.parse_args(argv)
    import torch
    from torch.profiler import ProfilerActivity, profile

    from mactile.torch import quantize_model
    from mactile.torch.decoder import Decoder, get_config
    from mactile.torch.e2e_bench import environment

    dev = torch.device("cuda")
    cfg = get_config("llama-3.1-8b", n_layers=args.layers)
    base = Decoder.random(cfg, device=dev, dtype=torch.float16).fuse_projections().use_fused_ops()
    prompt = torch.randint(0, cfg.vocab_size, (1, args.length), device=dev)
    pos = torch.arange(args.length, device=dev)
    out = {"env": environment(dev), "length": args.length, "layers": args.layers, "runs": []}
    for fmt in ["fp16"] + [f for f in args.formats.split(",") if f]:
        m, orig = base, base.model.layers
        if fmt != "fp16":  # layer 0 quantized, copied to every layer; the FP16 layers put back after
            layer0 = copy.deepcopy(orig[0])
            quantize_model(layer0, format=fmt, progress=False)
            base.model.layers = torch.nn.ModuleList(copy.deepcopy(layer0) for _ in range(args.layers))
        m.clear_caches()
        m.setup_caches(1, args.length)
        with torch.no_grad():
            m(prompt, pos)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            m(prompt, pos)
            torch.cuda.synchronize()
            wall = time.perf_counter() - t0
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                m(prompt, pos)
                torch.cuda.synchronize()
            import cProfile  # noqa: PLC0415
            import io  # noqa: PLC0415
            import pstats  # noqa: PLC0415
            pr = cProfile.Profile()
            pr.enable()
            m(prompt, pos)
            torch.cuda.synchronize()
            pr.disable()
            buf = io.StringIO()
            pstats.Stats(pr, stream=buf).sort_stats("tottime").print_stats(12)
            host = buf.getvalue()
        from torch.autograd import DeviceType
        kern: dict = {}
        for e in prof.events():
            if getattr(e, "device_type", None) == DeviceType.CUDA:
                kern[e.name] = kern.get(e.name, 0.0) + e.time_range.elapsed_us() * 1e-6
        top = sorted(kern.items(), key=lambda kv: -kv[1])[:10]
        r = {"format": fmt, "wall_s": wall, "kernel_sum_s": sum(kern.values()),
             "top": [{"kernel": k[:120], "s": v} for k, v in top], "host_profile": host}
        out["runs"].append(r)
        print(f"{fmt}: wall {wall * 1e3:.1f} ms, kernels {r['kernel_sum_s'] * 1e3:.1f} ms", flush=True)
        for t in r["top"][:5]:
            print(f"    {t['s'] * 1e3:8.2f} ms  {t['kernel']}")
        print("\n".join(ln for ln in host.splitlines()[:30] if ln.strip()))
        m.clear_caches()
        base.model.layers = orig
        torch.cuda.empty_cache()
    args.out.mkdir(parents=True, exist_ok=True)
    tmp = args.out / "prefill_profile.json.tmp"
    tmp.write_text(json.dumps(out, indent=1))
    tmp.replace(args.out / "prefill_profile.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())

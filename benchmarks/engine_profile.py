"""Launch chosen engine kernels once each (after a warm-up) so that Nsight Compute can
profile them: ``ncu -k regex:engine_gemm python benchmarks/engine_profile.py CASE ...``
with CASE = ``fmt:M:K:N[:bn:stages:wgs:n_ctas]`` (development aid). ``flexq-w6a6:M:K:N``
launches FlexQ's path as `linear` runs it (kernels ``flexq_*``) and ``w4a4:M:K:N`` ReSET's
nvfp4 W4A4 GEMV on pre-quantized activations (kernel ``w4a4_gemv``; at M = 1
``w4a4_gemv_rows``). ``cublas16:M:K:N`` and ``cublas8:M:K:N`` launch the benchmark's baselines
(``torch.matmul`` in FP16, ``torch._scaled_mm`` on E4M3 operands with fast accumulation off)
so that one Nsight run measures both sides."""
from __future__ import annotations

import sys

import numpy as np

from mactile.gpu.formats import ENGINE, NESTEDFP_FORMATS


def main(argv) -> int:
    import cupy as cp

    from mactile.gpu import engine as e
    from mactile.gpu.bench.gemm_bench import FORMATS, random_quantized
    from mactile.gpu.nestedfp.kernels import NestedFPLinear
    from mactile.gpu.packing import pack_w4a16

    rng = np.random.default_rng(3)
    for case in argv:
        p = case.split(":")
        f, M, K, N = p[0], int(p[1]), int(p[2]), int(p[3])
        # without an explicit configuration: the one the launch takes (tuning table, default)
        cfg = e.EngineConfig(*(int(v) for v in p[4:8])) if len(p) > 4 else None
        x = cp.asarray((rng.standard_normal((M, K)) * 0.5).astype(np.float16))
        if f in ("cublas16", "cublas8"):
            import torch
            tx = torch.as_tensor(x.get(), device="cuda")
            tw = torch.as_tensor((rng.standard_normal((N, K)) * 0.02).astype(np.float16), device="cuda")
            if f == "cublas16":
                run = lambda tx=tx, tw=tw: torch.matmul(tx, tw.t())  # noqa: E731
            else:
                Mp = max(16, -(-M // 16) * 16)  # the API's multiple of 16, as the benchmark pads
                xq = torch.nn.functional.pad(tx, (0, 0, 0, Mp - M)).to(torch.float8_e4m3fn)
                wq = tw.to(torch.float8_e4m3fn)
                one = torch.ones((), device="cuda")
                run = lambda xq=xq, wq=wq, one=one: torch._scaled_mm(  # noqa: E731
                    xq, wq.t(), scale_a=one, scale_b=one, out_dtype=torch.float16, use_fast_accum=False)
        elif f == "flexq-w6a6":
            from mactile.gpu.flexq.kernels import FlexQLinear
            from mactile.gpu.linear import linear
            layer = FlexQLinear(cp.asarray((rng.standard_normal((N, K)) * 0.05).astype(np.float16)))
            run = lambda: linear(x, layer)  # noqa: E731
        elif f == "w4a4":
            from mactile.gpu.w4a4 import gemv_w4a4, quantize_activation
            pw = pack_w4a16(random_quantized(FORMATS["nvfp4"], N, K, rng), layouts=("rowmajor",), xp=cp)
            act = quantize_activation(x, sync=True)
            run = lambda: gemv_w4a4(act, pw)  # noqa: E731
        elif f in NESTEDFP_FORMATS:
            w = (rng.standard_normal((N, K)) * 0.3).clip(-1.7, 1.7).astype(np.float16)
            layer = NestedFPLinear(cp.asarray(w))
            mode = ENGINE[f].mode
            run = lambda: layer(x, mode=mode, config=cfg)  # noqa: E731
        else:
            pw = pack_w4a16(random_quantized(FORMATS[f], N, K, rng), layouts=("frag",), xp=cp)
            run = lambda: e.gemm_fp4(x, pw, cfg=cfg)  # noqa: E731
        run()
        cp.cuda.Device().synchronize()
        print(f"profiled {case} {cfg or '(the launch default)'}", flush=True)
        run()
        cp.cuda.Device().synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

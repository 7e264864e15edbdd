"""Launch chosen engine kernels once each (after a warm-up) so that Nsight Compute can
profile them: ``ncu -k regex:engine_gemm python benchmarks/engine_profile.py CASE ...``
with CASE = ``fmt:M:K:N[:bn:stages:wgs:n_ctas]`` (development aid)."""
from __future__ import annotations

import sys

import numpy as np


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
        cfg = e.EngineConfig(*(int(v) for v in p[4:8])) if len(p) > 4 else e.config_for(f, M)
        x = cp.asarray((rng.standard_normal((M, K)) * 0.5).astype(np.float16))
        if f.startswith("nestedfp"):
            w = (rng.standard_normal((N, K)) * 0.3).clip(-1.7, 1.7).astype(np.float16)
            layer = NestedFPLinear(cp.asarray(w))
            mode = "fp16" if f == "nestedfp16" else "fp8"
            run = lambda: layer(x, mode=mode, config=cfg)  # noqa: E731
        else:
            pw = pack_w4a16(random_quantized(FORMATS[f], N, K, rng), layouts=("frag",), xp=cp)
            run = lambda: e.gemm_fp4(x, pw, cfg=cfg)  # noqa: E731
        run()
        cp.cuda.Device().synchronize()
        print(f"profiled {case} {cfg}", flush=True)
        run()
        cp.cuda.Device().synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

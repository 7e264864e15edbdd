"""``mactile convert`` and ``mactile inspect``: NVFP4/MXFP4 checkpoints (safetensors).

``convert IN OUT --to FORMAT`` re-encodes every quantized layer of a checkpoint file or
folder in another mactile format and writes it in a layout that loads back; ``inspect CKPT``
lists every tensor with its layout, format, shape, bytes and error statistics. Both read
one tensor at a time (:mod:`mactile.golden.checkpoints`) and write atomically; convert
re-encodes a few layers ahead on worker threads, through the bit-exact fast paths of
:mod:`mactile.fast` unless ``--golden``.
"""
from __future__ import annotations

import concurrent.futures
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path

from mactile.cli.common import CliError, atomic_outputs, check_output_file

#: What each target format is written as, where the input's layout does not store it.
_DEFAULT_LAYOUT = {"nvfp4": "compressed-tensors-nvfp4", "mxfp4": "compressed-tensors-mxfp4"}


def register(sub) -> None:
    from mactile.golden.checkpoints import LAYOUTS

    p = sub.add_parser(
        "convert", help="re-encode a checkpoint's NVFP4/MXFP4 layers in another format",
        description="Read a safetensors checkpoint (a file, or a folder of shards with its "
                    "index JSON) in a known NVFP4/MXFP4 layout, dequantize every quantized "
                    "layer as its library does, quantize it again in FORMAT and write the "
                    "checkpoint to OUT (the same file/shard structure; other tensors and "
                    "files copied). Reports each layer's re-encoding error.")
    p.add_argument("input", metavar="IN", help="checkpoint file (.safetensors) or folder")
    p.add_argument("output", metavar="OUT", help="output file (for a file) or new folder")
    p.add_argument("--to", required=True, metavar="FORMAT",
                   help="target format: nvfp4, mxfp4, razer, razer-act, razer-g128")
    p.add_argument("--block", type=int, metavar="N", help="target block size (format default)")
    p.add_argument("--special-values", metavar="A[,B]", help="RaZeR special magnitudes")
    p.add_argument("--layout", choices=list(LAYOUTS), metavar="LAYOUT",
                   help="output layout (default: the input's for the same format, "
                        "compressed-tensors for nvfp4/mxfp4, mactile otherwise): "
                        + ", ".join(LAYOUTS))
    p.add_argument("--in-layout", choices=list(LAYOUTS), metavar="LAYOUT",
                   help="force the input's layout (default: from config.json or tensor names)")
    p.add_argument("--quiet", action="store_true", help="no per-layer progress lines")
    p.add_argument("--golden", action="store_true",
                   help="re-encode with the golden NumPy models only (the reference: the same "
                        "bytes, several times slower)")
    p.set_defaults(func=run_convert)

    q = sub.add_parser(
        "inspect", help="list a checkpoint's tensors: layout, format, shape, bytes, error",
        description="Per tensor of a safetensors checkpoint: its layout, format, shape and "
                    "bytes; per quantized layer the statistics of its dequantized weight, "
                    "the error of the library's dequantization (FP32 steps, rounding to the "
                    "model dtype) against the exact one, and how well mactile's quantizer "
                    "of the same format reproduces its codes.")
    q.add_argument("checkpoint", metavar="CKPT", help="checkpoint file or folder")
    q.add_argument("--layout", choices=list(LAYOUTS), metavar="LAYOUT", help="force the layout")
    q.add_argument("--json", metavar="FILE", help="also write the table as JSON")
    q.set_defaults(func=run_inspect)


def _open(path, layout_name):
    from mactile.golden.checkpoints import Checkpoint

    if not str(path):  # Path("") is the current folder
        raise CliError("checkpoint path is empty")
    ck = Checkpoint(path)
    return ck, ck.layout(layout_name)


def _target_format(args):
    from mactile.golden import get_format

    sv = None
    if args.special_values is not None:
        try:
            sv = tuple(float(v) for v in args.special_values.split(","))
        except ValueError:
            raise CliError(f"--special-values must be numbers separated by commas, got "
                           f"{args.special_values!r}") from None
    try:
        fmt = get_format(args.to, block_size=args.block, special_values=sv)
    except (ValueError, TypeError) as e:
        raise CliError(f"--to: {e}") from None
    if fmt.storage is None or fmt.block_size % 2:
        raise CliError(f"--to {fmt.name}: convert writes FP4 block formats with per-block "
                       f"scales (nvfp4, mxfp4, razer, razer-act, razer-g128), not {fmt.name}")
    return fmt


def _out_layout(args, fmt, in_layout):
    from mactile.golden.checkpoints import LAYOUTS

    if args.layout is not None:
        lay = LAYOUTS[args.layout]
    elif in_layout.format_name == fmt.name and in_layout.block_size == fmt.block_size:
        lay = in_layout
    else:
        lay = LAYOUTS[_DEFAULT_LAYOUT.get(fmt.name, "mactile")]
        if lay.block_size != fmt.block_size:  # nvfp4/mxfp4 with another --block
            lay = LAYOUTS["mactile"]
    if lay.name != "mactile" and (lay.format_name != fmt.name or lay.block_size != fmt.block_size):
        raise CliError(f"--layout {lay.name} stores {lay.format_name} in blocks of "
                       f"{lay.block_size}; {fmt.describe()} needs --layout mactile")
    return lay


def _config_for(lay, fmt, config: dict | None) -> dict | None:
    """config.json with its quantization_config naming the output layout."""
    qc = {"compressed-tensors": lambda: {"quant_method": "compressed-tensors",
                                         "format": lay.config_marker[1]},
          "modelopt": lambda: {"quant_method": "modelopt", "quant_algo": "NVFP4"},
          "mxfp4": lambda: {"quant_method": "mxfp4"},
          "mactile": lambda: {"quant_method": "mactile", "format": fmt.describe()}}
    if config is None and lay.name != "mactile":
        return None
    out = dict(config or {})
    old = out.get("quantization_config")
    if isinstance(old, dict) and old.get("quant_method") == lay.config_marker[0] and \
            (not lay.config_marker[1] or old.get("format", old.get("quant_algo")) == lay.config_marker[1]):
        return out  # same layout: kept as it is
    out["quantization_config"] = qc[lay.config_marker[0]]()
    return out


def _check_output(args, is_folder: bool) -> Path:
    from mactile.golden.fileio import check_output_dir

    out = Path(args.output)
    inp = Path(args.input)
    if not is_folder:
        return check_output_file(out, inputs=[inp])
    try:
        if out.resolve() == inp.resolve() or inp.resolve() in out.resolve().parents:
            raise CliError(f"output folder {str(out)!r} is the input folder or inside it; "
                           "choose another")
    except OSError:
        pass
    if out.exists() and not (out.is_dir() and not any(out.iterdir())):
        raise CliError(f"output {str(out)!r} exists" + (" and is not empty" if out.is_dir() else "")
                       + "; convert writes a new folder (remove it or choose another path)")
    check_output_dir(out)
    return out


def run_convert(args) -> int:
    import numpy as np

    from mactile import fast
    from mactile.fast.recode import recode_layer
    from mactile.golden.block import InputError, _threads
    from mactile.golden.checkpoints import (MACTILE_META_KEY, PlannedFile, dequantize_layer,
                                            layer_from_quantized, layer_specs, layer_tensors,
                                            model_values, packed_layer_tensors, read_packed_layer,
                                            requant_error)

    fmt = _target_format(args)
    ck, in_layout = _open(args.input, args.in_layout)
    if in_layout is None:
        raise CliError(f"{args.input}: no quantized layer in any known layout (nothing to "
                       "convert); --in-layout forces one")
    lay = _out_layout(args, fmt, in_layout)
    out = _check_output(args, ck.is_folder)
    bases = ck.layer_bases(in_layout)
    specs_in = ck.mactile_specs() if in_layout.name == "mactile" else {}
    layer_names = sorted({b for b in bases.values()})
    if not layer_names:
        raise CliError(f"{args.input}: no quantized layer of layout {in_layout.name}")
    # Plan every output file first (headers need every shape); values come when written.
    pending: dict[str, tuple] = {}  # output tensor name -> (name, dtype, shape, produce)
    report: list[dict] = []
    t0 = time.perf_counter()
    quantize = fmt.quantize if args.golden else (lambda x: fast.quantize(fmt, x))

    def convert_layer(base: str, threads: int | None):
        """The layer's output tensors and its report line (run on a worker thread)."""
        codes_name = in_layout.tensor_name(base, in_layout.codes_suffix)
        p = read_packed_layer(base, in_layout, ck.fetch, str(ck.where[codes_name].path),
                              specs_in.get(base))
        carried = p.carried if lay.name == in_layout.name else None
        # Blocks that coincide: re-encoded from their codes through tables that the golden
        # pipeline computes (mactile.fast.recode), the same bytes; else dequantized.
        r = None if args.golden else recode_layer(p, fmt, lay.nibble_order, threads=threads)
        if r is not None:
            packed, scales, tensor_scale, mse, sqnr = r
            tensors = packed_layer_tensors(base, lay, fmt, p.shape, lambda: packed, scales,
                                           tensor_scale, carried=carried)
        else:
            w = p.unpacked()
            src = model_values(dequantize_layer(w, transpose=False), in_layout.model_dtype)
            k = src.shape[-1]
            kp = -(-k // fmt.block_size) * fmt.block_size
            x = src if kp == k else np.concatenate(
                [src, np.zeros(src.shape[:-1] + (kp - k,), dtype=np.float32)], axis=-1)
            try:
                q = quantize(x)
            except InputError as e:
                raise CliError(f"{args.input}: layer {base!r}: its dequantized weight cannot be "
                               f"re-encoded: {e}") from None
            mse, sqnr = requant_error(src, q)
            tensors = layer_tensors(layer_from_quantized(base, q, lay, shape=src.shape,
                                                         carried=carried))
        rec = {"layer": base, "shape": list(p.shape), "from": f"{p.format.name} ({in_layout.name})",
               "to": f"{fmt.name} ({lay.name})", "sqnr_db": round(sqnr, 3), "mse": mse}
        return rec, tensors

    # Layers are converted in the order the writer asks for them, up to `workers` ahead of
    # the one being written, each on a worker thread (NumPy releases the GIL): reading,
    # re-encoding and writing overlap, and at most workers + 1 layers are held.
    order: list[str] = []  # bases in write order (filled while planning)
    workers = 1 if args.golden else _threads()
    futures: dict = {}
    pool = concurrent.futures.ThreadPoolExecutor(workers) if workers > 1 else None

    submitted: set = set()

    def result_of(base: str):
        if pool is None:
            return convert_layer(base, None)
        i = position[base]
        for b in order[i:i + workers + 1]:
            if b not in submitted:
                submitted.add(b)
                futures[b] = pool.submit(convert_layer, b, 1)
        return futures.pop(base).result()

    def produce_for(base: str, name: str):
        def produce():
            if name not in pending:
                pending.clear()  # the previous layer is written
                rec, tensors = result_of(base)
                report.append(rec)
                if not args.quiet:
                    print(f"convert: [{len(report)}/{len(layer_names)}] {base} {rec['shape']}: "
                          f"{rec['from'].split()[0]} -> {fmt.name}, re-encoding error MSE "
                          f"{rec['mse']:.4g}, SQNR {rec['sqnr_db']:.2f} dB",
                          file=sys.stderr, flush=True)
                for t in tensors:
                    pending[t[0]] = t
            return pending.pop(name)[3]()
        return produce

    files = []
    for f in ck.files:
        meta = dict(f.metadata) if f.metadata is not None else None
        mactile_layers = {}
        # Each layer's tensors together, where its codes were: the Rust writer's dtype-sorted
        # order would put every layer's scales first and need every layer of the shard at once.
        pf = PlannedFile(f.path.name, meta, order=[])
        seen_layers = set()
        for name, e in f.entries.items():
            base = bases.get(name)
            if base is None:
                pf.tensors.append((name, e.dtype, e.shape, (lambda f=f, n=name: f.read(n))))
                pf.order.append(name)
                continue
            if base in seen_layers or name != in_layout.tensor_name(base, in_layout.codes_suffix):
                continue  # the layer's tensors go where its codes were
            seen_layers.add(base)
            order.append(base)
            cshape = e.shape
            if in_layout.grouped_codes:
                shape = cshape[:-2] + (cshape[-2] * in_layout.block_size,)
            else:
                shape = cshape[:-1] + (cshape[-1] * 2,)
            if lay.padding.value == "stored" and shape[-1] % fmt.block_size:
                shape = shape[:-1] + (-(-shape[-1] // fmt.block_size) * fmt.block_size,)
            carried = {n: (ck.entry(n).dtype, ck.entry(n).shape) for n in
                       (in_layout.tensor_name(base, s) for s in in_layout.carried_suffixes)
                       if n in ck.where and lay.name == in_layout.name}
            for spec in layer_specs(base, shape, fmt, lay, tensor_scale=_has_tensor_scale(fmt),
                                    carried=carried):
                pf.tensors.append(spec + (produce_for(base, spec[0]),))
                pf.order.append(spec[0])
            if lay.name == "mactile":
                d = {"format": fmt.name, "block_size": fmt.block_size}
                if getattr(fmt, "special_magnitudes", ()):
                    d["special_values"] = list(fmt.special_magnitudes)
                mactile_layers[base] = d
        if mactile_layers:
            pf.metadata = dict(pf.metadata or {})
            pf.metadata[MACTILE_META_KEY] = json.dumps(mactile_layers, sort_keys=True)
        files.append(pf)
    position = {b: i for i, b in enumerate(order)}
    try:
        total_out = _write(args, ck, out, files, lay, fmt)
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
    dt = time.perf_counter() - t0
    in_total = sum(f.size for f in ck.files)
    print(f"converted {len(report)} layers of {args.input} ({in_layout.name}) to {fmt.describe()} "
          f"in layout {lay.name} -> {args.output}: {in_total / 1e6:.4g} MB read, "
          f"{total_out / 1e6:.4g} MB written in {dt:.3g} s ({in_total / 1e6 / max(dt, 1e-9):.3g} MB/s)")
    worst = min(report, key=lambda r: r["sqnr_db"])
    print(f"re-encoding error per layer: SQNR {min(r['sqnr_db'] for r in report):.2f} .. "
          f"{max(r['sqnr_db'] for r in report):.2f} dB (worst {worst['layer']})")
    return 0


def _write(args, ck, out, files, lay, fmt) -> int:
    """Write the planned files to ``out`` atomically; the bytes written."""
    from mactile.golden.checkpoints import write_planned
    from mactile.golden.fileio import publish_dir, temp_dir, umask

    total_out = 0
    if not ck.is_folder:
        with atomic_outputs(out, inputs=[args.input]) as (tmp,):
            write_planned(None, files, target=tmp)
        total_out = os.path.getsize(out)
    else:
        extra = {}
        for p in sorted(ck.path.iterdir()):
            if p.suffix == ".safetensors" or p.name == "model.safetensors.index.json" or not p.is_file():
                continue
            extra[p.name] = p  # copied when written (a tokenizer may be large)
        cfg = _config_for(lay, fmt, ck.config)
        if cfg is not None:
            extra["config.json"] = (json.dumps(cfg, indent=2) + "\n").encode()
        if lay.name != "modelopt-nvfp4":
            extra.pop("hf_quant_config.json", None)
        elif "hf_quant_config.json" not in extra:
            extra["hf_quant_config.json"] = (json.dumps(
                {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "NVFP4",
                                                                    "group_size": 16}},
                indent=4) + "\n").encode()
        out_parent = out.resolve().parent
        tmp = temp_dir(out_parent, out.name)
        try:
            written = write_planned(tmp, files, index_metadata=(ck.index or {}).get("metadata", {})
                                    if ck.index is not None else None, extra_files=extra)
            total_out = sum(p.stat().st_size for p in written)
            if out.exists():
                out.rmdir()  # checked empty above
            os.chmod(tmp, 0o777 & ~umask())  # a new folder's usual mode, not mkdtemp's 0700
            publish_dir(tmp, out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return total_out


def _has_tensor_scale(fmt) -> bool:
    return bool(fmt.storage.tensor_scale)


def _num(v):
    """A float for JSON: ``"inf"`` for an exact result (infinite SQNR), None for NaN."""
    if v is None or math.isnan(v):
        return None
    return str(v) if math.isinf(v) else round(v, 3)


def run_inspect(args) -> int:
    import numpy as np

    from mactile.golden.checkpoints import LayerWeight, dequantize_layer, model_values, requant_error

    if args.json is not None:
        check_output_file(args.json, inputs=[args.checkpoint], what="--json file")
    ck, layout = _open(args.checkpoint, args.layout)
    rows = []
    print(f"{args.checkpoint}: {len(ck.files)} file(s), layout "
          f"{layout.name if layout else 'none (no quantized tensor)'}")
    for it in ck.items(layout):
        if isinstance(it, LayerWeight):
            q = it.quantized
            nbytes = sum(ck.entry(n).nbytes for n in it.tensor_names())
            lib = model_values(dequantize_layer(it, transpose=False), layout.model_dtype)
            finite = np.isfinite(lib)
            n_bad = int(lib.size - np.count_nonzero(finite))
            if n_bad:
                lib = np.where(finite, lib, np.float32(0))
            _, dq_sqnr = requant_error(lib, q)  # the library's FP32 steps and dtype rounding
            codes = q.codes
            blocks_zero = float(np.mean(~np.any(codes & 7, axis=-1)))
            saturated = float(np.mean((codes & 7) == 7))
            fmt = type(q.format)(block_size=q.format.block_size)  # the default convention
            padded = lib
            if q.shape[-1] != lib.shape[-1]:
                padded = np.zeros(q.shape, dtype=np.float32)
                padded[..., : lib.shape[-1]] = lib
            rq = fmt.quantize(padded)
            same = float(np.mean(rq.codes == codes))
            _, rq_sqnr = requant_error(lib, rq)
            amax = float(np.max(np.abs(lib)))
            row = {"tensor": it.base, "layout": layout.name, "format": q.format.name,
                   "shape": list(it.shape), "bytes": nbytes, "amax": amax, "non_finite": n_bad,
                   "zero_blocks": round(blocks_zero, 6), "codes_at_6": round(saturated, 6),
                   "dequant_vs_exact_sqnr_db": _num(dq_sqnr),
                   "requant_code_match": round(same, 6), "requant_sqnr_db": _num(rq_sqnr)}
            print(f"  {it.base}  {q.format.name} [{layout.name}] {list(it.shape)} {nbytes} B: "
                  f"amax {amax:.6g}, zero blocks {100 * blocks_zero:.1f}%, codes at 6 "
                  f"{100 * saturated:.1f}%; {layout.model_dtype.value} dequantization vs exact "
                  f"SQNR {dq_sqnr:.2f} dB; mactile {q.format.name} requant: "
                  f"{100 * same:.2f}% codes equal, SQNR {rq_sqnr:.2f} dB"
                  + (f"; {n_bad} non-finite values (counted as 0)" if n_bad else ""))
        else:
            row = {"tensor": it.name, "layout": None, "format": it.dtype, "shape": list(it.shape),
                   "bytes": ck.entry(it.name).nbytes}
            print(f"  {it.name}  {it.dtype} (not quantized) {list(it.shape)} {row['bytes']} B")
        rows.append(row)
    if args.json is not None:
        with atomic_outputs(args.json, inputs=[args.checkpoint], what="--json file") as (tmp,):
            tmp.write_text(json.dumps({"checkpoint": str(args.checkpoint),
                                       "layout": layout.name if layout else None,
                                       "tensors": rows}, indent=2) + "\n")
    return 0

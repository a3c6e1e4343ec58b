"""A/B of the two rankings of the mma.sync conv chooser on ResNet-18 and ResNet-50 (fp16 NHWC).

``conv_config(..., ranking=)`` (ops/schedules/gemm/chooser.py) ranks the mma.sync conv tiles
by its own count (``"count"``, the default) or by the products' chooser on the implicit
GEMM (``"estimate"``: ``gemm_time`` over ``gemm_candidates``, split-K included). The
ranking also decides where wgmma runs a conv on sm_90a (it must beat the mma.sync pick's
estimate). This script builds every distinct convolution function of the networks (the
conv with its fused bias / residual / ReLU, as ``graph.build`` runs it) with each ranking,
for each ``--targets`` entry (default ``cuda``: the GPU's own, sm_90a on an H100 with
wgmma; and ``cuda -arch=sm_90``: the same GPU on mma.sync only, which is what the ranking
decides on sm_80/sm_86/sm_89 and for layers wgmma does not take), checks each kernel
against the graph's reference executor, and times it (a CUDA graph of ``--number``
launches, ``--repeat`` replays between CUDA events, the two rankings interleaved, the
median). Layers whose two kernels are the same device IR are timed once. Then it builds
and times the whole networks at batch ``--batch`` with each ranking (``GraphModule.benchmark``).

It prints per target a table (configs, microseconds, count/estimate) with the geometric mean
of the ratio over the layers where the picks differ and the network times; a ratio above
1 means the estimate ranking is faster. To make the estimate the default, set
``DEFAULT_CONV_RANKING = "estimate"`` in ops/schedules/gemm/chooser.py (or, per process,
``PTXFORGE_CONV_RANKING=estimate``).

    python3 bench/bench_conv_chooser.py [--networks resnet_v1-18,resnet_v1-50] [--batch 1]
        [--targets "cuda;cuda -arch=sm_90"] [--no-networks] [--json out.json]
    python3 bench/bench_conv_chooser.py --dry-run   # no GPU: the picks, every kernel built
        # to PTX for sm_90a and sm_90; --sim N also runs the N smallest layers of each
        # ranking on the simulator against the reference executor
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import multiprocessing
import os
import sys
import tempfile
import time
import warnings
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import ptxforge
from ptxforge import graph
from ptxforge.backend_ptx import compile_module
from ptxforge.backend_ptx.cache import default_cache
from ptxforge.graph.build_module import function_tensors, optimize
from ptxforge.graph.fused import distinct_functions
from ptxforge.graph.interpreter import run_graph
from ptxforge.ir.te import ComputeOp
from ptxforge.ops.schedules import default_schedule
from ptxforge.ops.schedules.gemm.chooser import (
    CONV_RANKING_ENV,
    conv_config,
    wgmma_conv_choice,
)
from ptxforge.ops.schedules.gemm.forms import conv_gemm_form, tensorcore_conv_unsupported

RANKINGS = ("count", "estimate")
TOLERANCE = 1e-2  # of the largest output: fp16 inputs and output, fp32 sums


@contextlib.contextmanager
def ranked(ranking: str):
    """The conv chooser's ranking for everything built inside (the environment variable
    the chooser reads at each call)."""
    before = os.environ.get(CONV_RANKING_ENV)
    os.environ[CONV_RANKING_ENV] = ranking
    try:
        yield
    finally:
        if before is None:
            del os.environ[CONV_RANKING_ENV]
        else:
            os.environ[CONV_RANKING_ENV] = before


def conv_stage(tensors) -> ComputeOp | None:
    """The conv2d NHWC stage of a function's tensors, or None."""
    seen, todo = set(), [tensors[-1].op]
    while todo:
        op = todo.pop()
        if id(op) in seen or not isinstance(op, ComputeOp):
            continue
        seen.add(id(op))
        if op.reduce_axis and "conv2d_nhwc" in op.tag:
            return op
        todo.extend(t.op for t in op.input_tensors)
    return None


def describe(conv, target, ranking: str) -> str:
    """The configuration the default schedule takes for ``conv`` under ``ranking``."""
    w = wgmma_conv_choice(conv, None, target, ranking)
    if w is not None:
        return (f"wgmma {w.block_m}x{w.block_n} s{w.stages} f{w.in_flight}"
                + (f" sk{w.split_k}" if w.split_k > 1 else ""))
    c = conv_config(conv, target, ranking)
    return (f"mma {c.block_m}x{c.block_n}x{c.block_k} w{c.warps_m}x{c.warps_n} s{c.stages}"
            + (f" sk{c.split_k}" if c.split_k > 1 else ""))


@functools.cache
def conv_functions(networks: tuple, batch: int, target) -> list:
    """``(calls, FusedFunction, conv stage)`` of every distinct function of the fp16 NHWC
    ``networks`` that holds a tensor-core convolution, each once (``calls``: how many times
    each network calls it; the stem is shared)."""
    out, seen = [], {}
    for name in networks:
        net, params, _, _ = graph.get_network(name, batch, "NHWC")
        funcs, _ = distinct_functions(optimize(net, params, precision="float16"))
        for f in funcs:
            if f.is_view:
                continue
            if f.workload_key in seen:
                seen[f.workload_key][name] = f.count
                continue
            conv = conv_stage(function_tensors(f))
            if conv is None or tensorcore_conv_unsupported(conv, target) is not None:
                continue
            seen[f.workload_key] = calls = {name: f.count}
            out.append((calls, f, conv))
    return out


def _build_job(job) -> dict:
    """A build worker: :func:`build_variants` of layer ``index`` of ``conv_functions``,
    without the device IR (``{ranking: (compiled module, description) or None}``)."""
    networks, batch, target, index = job
    _, f, conv = conv_functions(networks, batch, target)[index]
    warnings.simplefilter("ignore")
    try:
        return {r: None if v is None else v[1:]
                for r, v in build_variants(f, conv, target).items()}
    except Exception as e:  # one layer's failure must not hide the others
        return {"error": f"{type(e).__name__}: {str(e)[:300]}"}


def build_layers(args, target) -> list:
    """``[(calls, FusedFunction, conv, {ranking: (module, description) or None})]`` for
    every conv function, built by ``args.jobs`` worker processes (spawned: a forked child
    of a process holding a CUDA context must not use CUDA). The kernels land in the disk
    cache the network builds read too."""
    layers = conv_functions(tuple(args.networks), args.batch, target)
    jobs = [(tuple(args.networks), args.batch, target, i) for i in range(len(layers))]
    if args.jobs <= 1:
        built = [_build_job(j) for j in jobs]
    else:
        with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")
                                 ) as pool:
            built = list(pool.map(_build_job, jobs))
    return [(*layer, b) for layer, b in zip(layers, built)]


def layer_name(f, conv) -> str:
    form = conv_gemm_form(conv)
    kh = int(conv.input_tensors[1].shape[0])
    return f"{f.name.removeprefix('vm_mod_fused_')}[{kh}x{kh} M{form.M} N{form.N} K{form.K}]"


def build_variants(f, conv, target) -> dict:
    """``{ranking: (device module, compiled module or None, description)}``; the estimate's
    entry is None where both rankings give the same device IR."""
    tensors = function_tensors(f)
    out, texts = {}, {}
    for r in RANKINGS:
        with target, ranked(r):  # lowering verifies against the current target
            dev_mod = ptxforge.lower(default_schedule(tensors[-1], target=target), tensors)
        text = str(dev_mod)
        if r != RANKINGS[0] and text == texts[RANKINGS[0]]:
            out[r] = None
            continue
        texts[r] = text
        ptx = None if target.is_sim else compile_module(dev_mod, target)
        out[r] = (dev_mod, ptx, describe(conv, target, r))
    return out


def random_args(f, rng) -> list[np.ndarray]:
    """Random host inputs of a function (weights scaled by their fan-in)."""
    arrays = []
    for t in function_tensors(f)[:-1]:
        shape = tuple(int(x) for x in t.shape)
        x = rng.standard_normal(shape)
        if len(shape) == 4 and t is not function_tensors(f)[0]:
            x /= math.sqrt(shape[0] * shape[1] * shape[2])  # an HWIO kernel
        elif len(shape) == 1:
            x *= 0.1
        else:
            x *= 0.5
        arrays.append(x.astype(t.dtype))
    return arrays


def reference(f, arrays) -> np.ndarray:
    names = [p.name for p in f.func.params]
    return np.asarray(run_graph(f.func, dict(zip(names, arrays)))[0], np.float64)


def rel_err(got, want) -> float:
    return float(np.abs(got.astype(np.float64) - want).max() / max(np.abs(want).max(), 1e-30))


def geomean(xs) -> float:
    xs = [x for x in xs if x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def dry_run(args) -> int:
    ok = True
    for tname in args.targets:
        target = ptxforge.target.as_target(tname)
        t0 = time.perf_counter()
        layers = build_layers(args, target)
        differ = 0
        for _, f, conv, v in layers:
            if "error" in v:
                print(f"  {layer_name(f, conv):50s} build failed: {v['error']}", flush=True)
                ok = False
                continue
            differ += v["estimate"] is not None
            print(f"  {layer_name(f, conv):50s} count {v['count'][1]:28s} estimate "
                  f"{v['estimate'][1] if v['estimate'] else '(same kernel)'}", flush=True)
        print(f"{target.arch}: {differ} of {len(layers)} conv functions differ; built in "
              f"{time.perf_counter() - t0:.1f} s", flush=True)
    if args.sim:
        ok &= sim_check(args)
    if args.networks_too:
        for tname in args.targets:
            for name in args.networks:
                net, params, _, _ = graph.get_network(name, args.batch, "NHWC")
                for r in RANKINGS:
                    t0 = time.perf_counter()
                    with ranked(r), warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        graph.build(net, tname, params, precision="float16")
                    print(f"  network {name} {tname} {r}: built in "
                          f"{time.perf_counter() - t0:.1f} s", flush=True)
    return 0 if ok else 1


def sim_check(args, target="cuda -arch=sm_80") -> bool:
    """The ``args.sim`` smallest conv functions of each ranking for ``target``, run on the
    simulator against the reference executor."""
    rng = np.random.default_rng(args.seed)
    layers = sorted(conv_functions(tuple(args.networks), args.batch, target),
                    key=lambda x: x[1].flop_count())[:args.sim]
    ok = True
    for _, f, conv in layers:
        arrays = random_args(f, rng)
        want = reference(f, arrays)
        tensors = function_tensors(f)
        for r in RANKINGS:
            with ranked(r):
                mod = ptxforge.build(default_schedule(tensors[-1], target=target), tensors,
                                     target="sim")
            out = np.zeros(tuple(int(x) for x in tensors[-1].shape), tensors[-1].dtype)
            mod(*arrays, out)
            err = rel_err(out, want)
            ok &= err <= TOLERANCE
            print(f"  sim {layer_name(f, conv):50s} {r:8s} {describe(conv, target, r):28s} "
                  f"rel err {err:.1e}{'' if err <= TOLERANCE else '  WRONG'}", flush=True)
    return ok


def time_layers(args, dev, target, rng) -> list[dict]:
    from ptxforge.backend_ptx import array, empty

    rows = []
    t0 = time.perf_counter()
    layers = build_layers(args, target)
    print(f"built {len(layers)} conv functions x {len(RANKINGS)} rankings in "
          f"{time.perf_counter() - t0:.0f} s", flush=True)
    for calls, f, conv, variants in layers:
        name = layer_name(f, conv)
        if "error" in variants:
            print(f"{name}: build failed: {variants['error']}", flush=True)
            rows.append(dict(layer=name, calls=calls, error=variants["error"]))
            continue
        host = random_args(f, rng)
        want = reference(f, host)
        gpu_args = [array(x, dev) for x in host]
        out_t = function_tensors(f)[-1]
        loaded, row = {}, dict(layer=name, calls=calls)
        for r, v in variants.items():
            if v is None:
                continue
            mod = v[0].load(dev)
            out = empty(tuple(int(x) for x in out_t.shape), out_t.dtype, dev)
            mod(*gpu_args, out)
            row[f"{r}_err"] = err = rel_err(out.numpy(), want)
            row[f"{r}_cfg"] = v[1]
            row["correct"] = row.get("correct", True) and err <= TOLERANCE
            loaded[r] = (mod, out)
        times = {r: [] for r in loaded}
        for _ in range(args.rounds):  # interleaved, so drift hits both alike
            for r, (mod, out) in loaded.items():
                times[r].append(mod.time_evaluator("main", number=args.number,
                                                   repeat=args.repeat, graph=True)(
                    *gpu_args, out).median)
        for r in loaded:
            row[f"{r}_us"] = float(np.median(times[r])) * 1e6
        if "estimate" not in loaded:
            row["estimate_us"], row["estimate_cfg"] = row["count_us"], "(same kernel)"
        row["ratio"] = row["count_us"] / row["estimate_us"]
        rows.append(row)
        print(f"{name:50s} x{sum(calls.values()):<2d} {row['count_cfg']:28s} "
              f"{row['count_us']:8.2f} us  {row['estimate_cfg']:28s} "
              f"{row['estimate_us']:8.2f} us  {row['ratio']:.3f}"
              f"{'' if row['correct'] else '  WRONG'}", flush=True)
    return rows


def time_networks(args, dev, target, rng) -> list[dict]:
    rows = []
    for name in args.networks:
        net, params, shape, _ = graph.get_network(name, args.batch, "NHWC")
        x = rng.standard_normal(shape).astype("float32")
        row, outs = dict(network=name, target=target.arch), {}
        for r in RANKINGS:
            t0 = time.perf_counter()
            with ranked(r), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                lib = graph.build(net, target, params, precision="float16")
            module = graph.GraphModule(lib, dev)
            module.set_input("data", x)
            module.run()
            outs[r] = module.get_output(0).numpy().astype(np.float64)
            row[f"{r}_build_s"] = time.perf_counter() - t0
            row[f"{r}_ms"] = module.benchmark(dev, repeat=args.repeat,
                                              min_repeat_ms=args.min_repeat_ms).median * 1e3
        row["ratio"] = row["count_ms"] / row["estimate_ms"]
        row["agree"] = rel_err(outs["estimate"], outs["count"])
        rows.append(row)
        print(f"network {name} b{args.batch} on {target.arch}: count {row['count_ms']:.4f} ms, "
              f"estimate {row['estimate_ms']:.4f} ms, count/estimate {row['ratio']:.3f} "
              f"(outputs differ by {row['agree']:.1e}; built in {row['count_build_s']:.0f} + "
              f"{row['estimate_build_s']:.0f} s)", flush=True)
    return rows


def run_gpu(args) -> int:
    dev = ptxforge.cuda(0)
    major, minor = dev.compute_capability
    print(f"device: {dev.name} (sm_{major}{minor}); rankings {RANKINGS}; a ratio above 1: "
          "the estimate ranking is faster", flush=True)
    rng = np.random.default_rng(args.seed)
    report, ok = {"device": dev.name, "targets": {}}, True
    for tname in args.targets:
        target = ptxforge.target.as_target(tname)
        print(f"\n== {tname} ({target.arch}) ==", flush=True)
        t0 = time.perf_counter()
        rows = time_layers(args, dev, target, rng)
        done = [r for r in rows if "ratio" in r]
        ok &= all(r.get("correct") for r in done) and len(done) == len(rows)
        moved = [r for r in done if r["estimate_cfg"] != "(same kernel)"]
        per_net = {}
        for r in done:
            for net, n in r["calls"].items():
                c, e = per_net.get(net, (0.0, 0.0))
                per_net[net] = (c + n * r["count_us"], e + n * r["estimate_us"])
        print(f"layers: {len(moved)} of {len(done)} differ; geometric mean count/estimate "
              f"{geomean([r['ratio'] for r in moved]):.3f} over those, "
              f"{geomean([r['ratio'] for r in done]):.3f} over all "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)
        for net, (c, e) in per_net.items():
            print(f"  {net}: conv layers x calls {c:.1f} us (count) against {e:.1f} us "
                  f"(estimate): {c / e:.3f}", flush=True)
        nets = time_networks(args, dev, target, rng) if args.networks_too else []
        report["targets"][tname] = {"layers": rows, "networks": nets}
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=1)
    return 0 if ok else 1


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--networks", default="resnet_v1-18,resnet_v1-50")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--targets", default=None, help="';'-separated targets (default: "
                   "'cuda;cuda -arch=sm_90', with --dry-run 'cuda -arch=sm_90a;cuda "
                   "-arch=sm_90')")
    p.add_argument("--no-networks", dest="networks_too", action="store_false",
                   help="time the conv layers only, not the whole networks")
    p.add_argument("--number", type=int, default=100)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--min-repeat-ms", type=float, default=50.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jobs", type=int, default=min(16, os.cpu_count() or 1),
                   help="build worker processes (default: the CPUs, at most 16)")
    p.add_argument("--json")
    p.add_argument("--dry-run", action="store_true", help="no GPU: picks and PTX builds")
    p.add_argument("--sim", type=int, default=0, metavar="N",
                   help="with --dry-run: run the N smallest layers on the simulator")
    args = p.parse_args(argv)
    args.networks = [x.strip() for x in args.networks.split(",") if x.strip()]
    default = "cuda -arch=sm_90a;cuda -arch=sm_90" if args.dry_run else "cuda;cuda -arch=sm_90"
    args.targets = [x.strip() for x in (args.targets or default).split(";") if x.strip()]
    if not os.environ.get("PTXFORGE_KERNEL_CACHE"):
        # the build workers' kernels, shared with the network builds of this process
        os.environ["PTXFORGE_KERNEL_CACHE"] = tempfile.mkdtemp(prefix="conv_chooser_")
        default_cache().directory = os.environ["PTXFORGE_KERNEL_CACHE"]
    return dry_run(args) if args.dry_run else run_gpu(args)


if __name__ == "__main__":
    sys.exit(main())

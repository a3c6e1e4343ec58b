"""conv2d NHWC in float16 on tensor cores against cuDNN (fp16, channels_last) in one process.

Layers: the seed layer of the tutorials (batch 1, 7x7, 512 -> 512, 3x3, stride 1, pad 1)
and the convolutions of ResNet-18 at batch 1 (224x224 input; ``--batch`` for another).
Ours: the default schedule (the implicit-GEMM tensor-core schedule of
``ops/schedules/tensorcore_conv.py``: wgmma where its chooser takes it on sm_90a, else
mma.sync; the row names the config) for every layer, the wgmma conv with each
``--wgmma-config`` (split-K among its knobs), and for the seed layer also the best of a
short AutoTVM tuning (``--trials``) of the template ``conv2d_nhwc_tensorcore.cuda`` on this
GPU and, with ``--autosched N``, the best of N auto-scheduler trials from an empty log
(its tensor-core conv sketch competing with the CUDA-core sketches). Theirs:
``torch.nn.functional.conv2d`` on float16 channels_last tensors (cuDNN,
``cudnn.benchmark`` on). Both compute the convolution alone, summed in float32 and
written as float16.

Every kernel is first checked on random inputs against PyTorch's float64 convolution of the
same float16 inputs (and PyTorch's fp16 result is checked the same way); then both sides
are graph-timed: ``--number`` launches captured in one CUDA graph, replayed ``--repeat``
times between CUDA events, the median per launch (ours through ``time_evaluator(...,
graph=True)``, cuDNN through ``bench_tensorcore.torch_time``).

    python3 bench/bench_conv_tensorcore.py [--trials 32] [--autosched 200]
        [--layers "seed (layer4 3x3)"] [--batch 16] [--wgmma-config 64,2,4,1,2 ...]
        [--json out]
    python3 bench/bench_conv_tensorcore.py --dry-run   # no GPU: build every kernel (PTX,
                                                       # ptxas) and instantiate the template
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import warnings

import numpy as np
import ptxforge
from ptxforge import autosched, autotvm
from ptxforge.autosched.state import state_from_payload
from ptxforge.autotvm import tensorcore_conv as template
from ptxforge.backend_ptx import compile_module
from ptxforge.ops.schedules import default_schedule

SEED = (1, 7, 7, 512, 512, 3, 1, 1)
# name: (N, H, W, CI, CO, K, stride, pad); ResNet-18's convolutions at batch 1
LAYERS = {
    "seed (layer4 3x3)": SEED,
    "conv1 7x7/2": (1, 224, 224, 3, 64, 7, 2, 3),
    "conv1 7x7/2 c4": (1, 224, 224, 4, 64, 7, 2, 3),  # the stem as pad_conv_channels pads it
    "conv1 7x7/2 c8": (1, 224, 224, 8, 64, 7, 2, 3),  # ... with pad_channels=8
    "layer1 3x3": (1, 56, 56, 64, 64, 3, 1, 1),
    "layer2 3x3/2": (1, 56, 56, 64, 128, 3, 2, 1),
    "layer2 3x3": (1, 28, 28, 128, 128, 3, 1, 1),
    "layer2 down 1x1/2": (1, 56, 56, 64, 128, 1, 2, 0),
    "layer3 3x3/2": (1, 28, 28, 128, 256, 3, 2, 1),
    "layer3 3x3": (1, 14, 14, 256, 256, 3, 1, 1),
    "layer3 down 1x1/2": (1, 28, 28, 128, 256, 1, 2, 0),
    "layer4 3x3/2": (1, 14, 14, 256, 512, 3, 2, 1),
    "layer4 down 1x1/2": (1, 14, 14, 256, 512, 1, 2, 0),
}
TOLERANCE = 4e-3  # of the largest output: fp16 inputs exact, fp32 sums, fp16 rounding
ANCHOR_SEED_MS = 0.0153  # cuDNN fp16 NHWC on an H100 (issue 14)


def template_args(shape) -> tuple:
    n, h, w, ci, co, k, stride, pad = shape
    return (n, h, w, ci, co, k, k, stride, pad, "float16")


def flop(shape) -> float:
    n, h, w, ci, co, k, stride, pad = shape
    oh = (h + 2 * pad - k) // stride + 1
    ow = (w + 2 * pad - k) // stride + 1
    return 2.0 * n * oh * ow * co * k * k * ci


def build_default(shape, target):
    """``(compiled module, tensors, seconds, config)`` of the default schedule (the config
    of the wgmma conv where the default takes it, sm_90a, else of the mma.sync conv)."""
    from ptxforge.ops.schedules.gemm.chooser import choose_conv_config, wgmma_conv_choice

    data, kernel, out, conv = template.conv2d_nhwc_declaration(*template_args(shape))
    t0 = time.perf_counter()
    with ptxforge.target.as_target(target):
        s = default_schedule(out, target=target)
        mod = compile_module(ptxforge.lower(s, [data, kernel, out]), target)
        epilogue = None if out.op is conv else out.op
        cfg = wgmma_conv_choice(conv, epilogue, target) or choose_conv_config(conv, target,
                                                                           epilogue)
    return mod, [data, kernel, out], time.perf_counter() - t0, cfg


def build_wgmma(shape, target, cfg):
    """``(compiled module, tensors, seconds)`` of the wgmma conv with ``cfg`` (a
    ``WgmmaScheduleConfig``; sm_90a)."""
    from ptxforge.ops.schedules.gemm.schedule import schedule_conv2d_nhwc_wgmma

    data, kernel, out, conv = template.conv2d_nhwc_declaration(*template_args(shape))
    t0 = time.perf_counter()
    with ptxforge.target.as_target(target):
        s, epilogue = template.inline_around(out, conv)
        schedule_conv2d_nhwc_wgmma(s, conv, epilogue, target, cfg)
        mod = compile_module(ptxforge.lower(s, [data, kernel, out]), target)
    return mod, [data, kernel, out], time.perf_counter() - t0


def build_tuned(shape, log: str, target):
    """The template with the best config of ``log`` (or its fallback)."""
    t0 = time.perf_counter()
    with ptxforge.target.as_target(target), autotvm.apply_history_best(log):
        s, tensors = template.conv2d_nhwc_tensorcore(*template_args(shape))
        mod = compile_module(ptxforge.lower(s, tensors), target)
    return mod, tensors, time.perf_counter() - t0


def make_tuner(task, seed: int):
    """XGBoost's tuner where xgboost is importable, else random search."""
    try:
        import xgboost  # noqa: F401

        return autotvm.tuner.XGBTuner(task, seed=seed), "xgb"
    except ImportError:
        return autotvm.tuner.RandomTuner(task, seed=seed), "random (xgboost missing)"


def tune_seed(trials: int, log: str, target, args) -> dict:
    task = autotvm.task.create(template.NAME, args=template_args(SEED), target=target)
    tuner, kind = make_tuner(task, args.seed)
    option = autotvm.measure_option(
        builder=autotvm.LocalBuilder(),
        runner=autotvm.LocalRunner(number=20, repeat=3, timeout=20))
    t0 = time.perf_counter()
    tuner.tune(n_trial=trials, measure_option=option,
               callbacks=[autotvm.callback.log_to_file(log)])
    secs = time.perf_counter() - t0
    print(f"tuned the seed layer: {trials} trials ({kind}) in {secs:.0f} s "
          f"({trials / secs:.2f} trials/s); space {len(task.config_space)}; best "
          f"{tuner.best_config}", flush=True)
    return {"trials": trials, "tuner": kind, "seconds": secs, "best": str(tuner.best_config)}


@autosched.register_workload
def conv2d_nhwc_fp16(N, H, W, CI, CO, KH, KW, stride, padding, dtype):
    """The template's computation, for the auto-scheduler (conv summed in float32, cast)."""
    return list(template.conv2d_nhwc_declaration(N, H, W, CI, CO, KH, KW, stride, padding,
                                                 dtype)[:3])


def autosched_seed(trials: int, log: str, args) -> dict:
    """Auto-schedule the seed layer from an empty log on this GPU (the tensor-core conv
    sketch competes with the CUDA-core ones)."""
    task = autosched.SearchTask(func=conv2d_nhwc_fp16, args=template_args(SEED),
                                target="cuda")
    if os.path.exists(log):
        os.remove(log)
    ctx = autosched.LocalRPCMeasureContext(min_repeat_ms=10, repeat=3, timeout=20,
                                           check_correctness=True)
    opts = autosched.TuningOptions(num_measure_trials=trials, num_measures_per_round=64,
                                   runner=ctx.runner,
                                   measure_callbacks=[autosched.RecordToFile(log)])
    t0 = time.perf_counter()
    try:
        task.tune(opts, search_policy=autosched.SketchPolicy(task, autosched.XGBModel(),
                                                            seed=args.seed))
    finally:
        ctx.close()
    secs = time.perf_counter() - t0
    inp, res = autosched.ApplyHistoryBest(log).best[task.workload_key]
    sketch = task.sketches[state_from_payload(task, inp.payload).sketch].name
    print(f"auto-scheduled the seed layer: {trials} trials in {secs:.0f} s "
          f"({trials / secs:.2f} trials/s); best {res.mean * 1e3:.4f} ms, sketch {sketch}",
          flush=True)
    return {"trials": trials, "seconds": secs, "best_ms": res.mean * 1e3, "sketch": sketch,
            "task": task}


def build_autosched(task, log: str, target):
    t0 = time.perf_counter()
    with ptxforge.target.as_target(target):
        s, tensors = task.apply_best(log)
        mod = compile_module(ptxforge.lower(s, tensors), target)
    return mod, tensors, time.perf_counter() - t0


def rel_err(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got.astype(np.float64) - want).max() / np.abs(want).max())


def dry_run(args) -> int:
    """No GPU: build every kernel of the run for ``args.target`` (lower, LLVM, PTX and ptxas
    where installed) and instantiate the template on a few configs of its space."""
    from ptxforge.backend_ptx import find_ptxas

    print(f"dry run for {args.target} (ptxas: {find_ptxas() or 'not installed'})")
    for name in args.layers:
        shape = LAYERS[name]
        mod, _, secs, cfg = build_default(shape, args.target)
        ptx = "".join(k.get_source("ptx") for k in mod.kernels.values())
        assert "mma.sync.aligned.m16n8k16" in ptx or "wgmma.mma_async" in ptx, name
        print(f"  {name:20s} default {describe(cfg)}: built in {secs:.2f} s")
        for wc in args.wgmma_config:
            build_wgmma(shape, args.target, wc)
            print(f"  {name:20s} {describe(wc)}: built")
    task = autotvm.task.create(template.NAME, args=template_args(SEED), target=args.target)
    rng = np.random.default_rng(args.seed)
    built = rejected = 0
    for index in rng.choice(len(task.config_space), size=24, replace=False):
        cfg = task.config_space.get(int(index))
        try:
            s, tensors = task.instantiate(cfg)
        except autotvm.InstantiationError:
            rejected += 1
            continue
        if built < 2:
            compile_module(ptxforge.lower(s, tensors), args.target)
        built += 1
    print(f"  template: space {len(task.config_space)}, 24 random configs: {built} "
          f"instantiated, {rejected} rejected by a rule")
    with tempfile.TemporaryDirectory() as d:
        empty = os.path.join(d, "empty.log")
        open(empty, "w").close()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            build_tuned(SEED, empty, args.target)
    print("  template fallback (no record): built")
    return 0


def describe(cfg) -> str:
    if hasattr(cfg, "warpgroups"):  # the wgmma conv
        return (f"wgmma {cfg.block_m}x{cfg.block_n} stages {cfg.stages} in_flight "
                f"{cfg.in_flight} split_k {cfg.split_k}")
    return (f"block {cfg.block_m}x{cfg.block_n}x{cfg.block_k} warps {cfg.warps_m}x"
            f"{cfg.warps_n} stages {cfg.stages} vec {cfg.vec}"
            + (f" split_k {cfg.split_k}" if cfg.split_k > 1 else ""))


def wgmma_config(text: str):
    """``BN,WG,ST,FL,SK`` -> a ``WgmmaScheduleConfig``."""
    from ptxforge.ops.schedules.gemm.knobs import WgmmaScheduleConfig

    vals = [int(x) for x in text.split(",")]
    if len(vals) != 5:
        raise argparse.ArgumentTypeError(f"--wgmma-config takes BN,WG,ST,FL,SK, got {text!r}")
    return WgmmaScheduleConfig(*vals)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", default=",".join(LAYERS),
                   help="comma-separated layer names (default: all): " + ", ".join(LAYERS))
    p.add_argument("--trials", type=int, default=0, help="AutoTVM trials on the seed layer "
                   "(default 0: the default schedule only; about 1 to 2 trials/s)")
    p.add_argument("--autosched", type=int, default=0, help="auto-scheduler trials on the "
                   "seed layer from an empty log (default 0: none)")
    p.add_argument("--log", help="tuning record file (default: a temporary one); an existing "
                   "file is extended")
    p.add_argument("--batch", type=int, default=1, help="the layers' batch (default 1)")
    p.add_argument("--wgmma-config", type=wgmma_config, action="append", default=[],
                   metavar="BN,WG,ST,FL,SK", help="also the wgmma conv with block_n, "
                   "warpgroups, stages, in_flight, split_k (sm_90a; repeatable)")
    p.add_argument("--number", type=int, default=200)
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--target", default="cuda", help="for --dry-run (default: cuda)")
    p.add_argument("--json")
    p.add_argument("--dry-run", action="store_true",
                   help="no GPU: build every kernel and instantiate the template only")
    args = p.parse_args(argv)
    args.layers = [x.strip() for x in args.layers.split(",") if x.strip()]
    unknown = [x for x in args.layers if x not in LAYERS]
    if unknown:
        p.error(f"unknown layers {unknown}; known: {', '.join(LAYERS)}")
    for name in args.layers:
        LAYERS[name] = (args.batch,) + LAYERS[name][1:]
    if args.dry_run:
        return dry_run(args)
    return run_gpu(args)


def run_gpu(args) -> int:
    import torch
    from bench_tensorcore import torch_time
    from ptxforge.backend_ptx import array, cuda, empty

    dev = cuda(0)
    target = ptxforge.target.as_target("cuda")  # the device's facts (SMs, limits)
    torch.backends.cudnn.benchmark = True
    major, minor = dev.compute_capability
    print(f"device: {dev.name} (sm_{major}{minor}); torch {torch.__version__}, cuDNN "
          f"{torch.backends.cudnn.version()}", flush=True)
    ok_tuning = True
    log = args.log or os.path.join(tempfile.mkdtemp(), "conv_tc.log")
    tuning = None
    if args.trials and "seed (layer4 3x3)" in args.layers:
        try:
            tuning = tune_seed(args.trials, log, target, args)
        except Exception as e:  # report it and still measure the default schedule
            print(f"tuning failed: {type(e).__name__}: {e}", flush=True)
            tuning, ok_tuning = None, False
    searched = None
    if args.autosched and "seed (layer4 3x3)" in args.layers:
        try:
            searched = autosched_seed(args.autosched, log + ".autosched.json", args)
        except Exception as e:
            print(f"auto-scheduling failed: {type(e).__name__}: {e}", flush=True)
            ok_tuning = False
    rows, ok_all = [], ok_tuning
    rng = np.random.default_rng(args.seed)
    for name in args.layers:
        shape = LAYERS[name]
        n, h, w, ci, co, k, stride, pad = shape
        x = (rng.standard_normal((n, h, w, ci)) * 0.5).astype(np.float16)
        wt = (rng.standard_normal((k, k, ci, co)) / np.sqrt(k * k * ci)).astype(np.float16)
        # torch: NCHW views with channels_last memory (exactly our NHWC arrays)
        tx = torch.from_numpy(x).cuda().permute(0, 3, 1, 2)
        tw = torch.from_numpy(wt).cuda().permute(3, 2, 0, 1).contiguous(
            memory_format=torch.channels_last)
        want = torch.nn.functional.conv2d(tx.double(), tw.double(), None, stride, pad)
        want = want.permute(0, 2, 3, 1).cpu().numpy()

        def cudnn(tx=tx, tw=tw, stride=stride, pad=pad):
            return torch.nn.functional.conv2d(tx, tw, None, stride, pad)

        theirs = cudnn().permute(0, 2, 3, 1).float().cpu().numpy()
        cudnn_err = rel_err(theirs, want)
        cudnn_ms = torch_time(cudnn, args.number, args.repeat)
        builds = []
        try:
            mod, tensors, secs, cfg = build_default(shape, target)
            builds.append((f"default ({describe(cfg)})", mod, tensors, secs))
            for wc in args.wgmma_config:
                builds.append((describe(wc),) + build_wgmma(shape, target, wc))
            if name == "seed (layer4 3x3)" and tuning is not None:
                builds.append(("autotvm best",) + build_tuned(shape, log, target))
            if name == "seed (layer4 3x3)" and searched is not None:
                builds.append(("autosched best",) + build_autosched(
                    searched["task"], log + ".autosched.json", target))
        except Exception as e:  # one layer's failure must not hide the others' figures
            print(f"{name:20s} build failed: {type(e).__name__}: {str(e)[:400]}", flush=True)
            rows.append(dict(layer=name, shape=shape, error=f"{type(e).__name__}: {e}"))
            ok_all = False
        for kind, mod, tensors, secs in builds:
            loaded = mod.load(dev)
            arrays = [array(x, dev), array(wt, dev)]
            out = empty(tensors[-1].shape, "float16", dev)
            loaded(*arrays, out)
            err = rel_err(out.numpy(), want)
            ok = err <= TOLERANCE
            ok_all &= ok
            ms = loaded.time_evaluator("main", number=args.number, repeat=args.repeat,
                                       graph=True)(*arrays, out).median * 1e3
            row = dict(layer=name, shape=shape, ours=kind, ms=ms,
                       tflops=flop(shape) / ms / 1e9, cudnn_ms=cudnn_ms,
                       cudnn_over_ours=cudnn_ms / ms, rel_err=err, cudnn_rel_err=cudnn_err,
                       correct=ok, compile_s=secs)
            rows.append(row)
            print(f"{name:20s} {kind:13s} ours {ms:.4f} ms ({row['tflops']:6.1f} TFLOP/s)  "
                  f"cuDNN {cudnn_ms:.4f} ms  cuDNN/ours {cudnn_ms / ms:.3f}  rel err "
                  f"{err:.1e} {'ok' if ok else 'WRONG'} (cuDNN {cudnn_err:.1e}; compile "
                  f"{secs:.2f} s)", flush=True)
    seed = [r for r in rows if r["layer"] == "seed (layer4 3x3)" and "ms" in r]
    if seed:
        best = min(seed, key=lambda r: r["ms"])
        print(f"seed layer: best ours {best['ms']:.4f} ms ({best['ours']}) against cuDNN "
              f"{best['cudnn_ms']:.4f} ms in this run (anchor {ANCHOR_SEED_MS} ms on an H100)")
    if args.json:
        with open(args.json, "w") as f:
            if searched is not None:
                searched = {k: v for k, v in searched.items() if k != "task"}
            json.dump({"device": dev.name, "tuning": tuning, "autosched": searched,
                       "results": rows}, f, indent=1)
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())

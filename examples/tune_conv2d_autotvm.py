"""Tuning a high-performance convolution on NVIDIA GPUs with AutoTVM.

TVM's tutorial "Tuning High Performance Convolution on NVIDIA GPUs" as a script: define a
tunable template for conv2d, search its space with a tuner, then build the best config,
check it against numpy and time it.

Without a GPU (``--runner sim``) candidates are checked on the CPU simulator where that is
quick, and every time printed is an *estimate* from an analytical model of an H100, not a
measurement::

    python examples/tune_conv2d_autotvm.py --runner sim --trials 4
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time

import numpy as np
import ptxforge
from ptxforge import autotvm, ops, te
from ptxforge.ops.testing import conv2d_nchw_python

# -- Step 1: define the search space --------------------------------------------------------


@autotvm.template("tutorial/conv2d_no_batching")
def conv2d_no_batching(N, H, W, CO, CI, KH, KW, stride, padding):
    assert N == 1, "Only consider batch_size = 1 in this template"

    data = te.placeholder((N, CI, H, W), name="data")
    kernel = te.placeholder((CO, CI, KH, KW), name="kernel")
    conv = ops.nn.conv2d_nchw(data, kernel, stride, padding, dilation=1, out_dtype="float32")
    s = te.create_schedule([conv.op])

    ##### space definition begin #####
    n, f, y, x = s[conv].op.axis
    rc, ry, rx = s[conv].op.reduce_axis

    cfg = autotvm.get_config()
    cfg.define_split("tile_f", f, num_outputs=4)
    cfg.define_split("tile_y", y, num_outputs=4)
    cfg.define_split("tile_x", x, num_outputs=4)
    cfg.define_split("tile_rc", rc, num_outputs=3)
    cfg.define_split("tile_ry", ry, num_outputs=3)
    cfg.define_split("tile_rx", rx, num_outputs=3)
    cfg.define_knob("auto_unroll_max_step", [0, 512, 1500])
    cfg.define_knob("unroll_explicit", [0, 1])
    ##### space definition end #####

    # inline padding
    pad_data = conv.op.input_tensors[0]
    s[pad_data].compute_inline()
    data, raw_data = pad_data, data

    output = conv
    OL = s.cache_write(conv, "local")

    # create cache stage
    AA = s.cache_read(data, "shared", [OL])
    WW = s.cache_read(kernel, "shared", [OL])
    AL = s.cache_read(AA, "local", [OL])
    WL = s.cache_read(WW, "local", [OL])

    # tile and bind spatial axes
    n, f, y, x = s[output].op.axis
    bf, vf, tf, fi = cfg["tile_f"].apply(s, output, f)
    by, vy, ty, yi = cfg["tile_y"].apply(s, output, y)
    bx, vx, tx, xi = cfg["tile_x"].apply(s, output, x)
    kernel_scope = n  # this is the scope to attach global config inside this kernel

    s[output].reorder(n, bf, by, bx, vf, vy, vx, tf, ty, tx, fi, yi, xi)
    s[output].bind(bf, te.thread_axis("blockIdx.z"))
    s[output].bind(by, te.thread_axis("blockIdx.y"))
    s[output].bind(bx, te.thread_axis("blockIdx.x"))
    s[output].bind(vf, te.thread_axis("vthread"))
    s[output].bind(vy, te.thread_axis("vthread"))
    s[output].bind(vx, te.thread_axis("vthread"))
    s[output].bind(tf, te.thread_axis("threadIdx.z"))
    s[output].bind(ty, te.thread_axis("threadIdx.y"))
    s[output].bind(tx, te.thread_axis("threadIdx.x"))
    s[OL].compute_at(s[output], tx)

    # tile reduction axes
    n, f, y, x = s[OL].op.axis
    rc, ry, rx = s[OL].op.reduce_axis
    rco, rcm, rci = cfg["tile_rc"].apply(s, OL, rc)
    ryo, rym, ryi = cfg["tile_ry"].apply(s, OL, ry)
    rxo, rxm, rxi = cfg["tile_rx"].apply(s, OL, rx)
    s[OL].reorder(rco, ryo, rxo, rcm, rym, rxm, rci, ryi, rxi, n, f, y, x)

    s[AA].compute_at(s[OL], rxo)
    s[WW].compute_at(s[OL], rxo)
    s[AL].compute_at(s[OL], rxm)
    s[WL].compute_at(s[OL], rxm)

    # cooperative fetching
    for load in [AA, WW]:
        n, f, y, x = s[load].op.axis
        fused = s[load].fuse(n, f, y, x)
        tz, fused = s[load].split(fused, nparts=cfg["tile_f"].size[2])
        ty, fused = s[load].split(fused, nparts=cfg["tile_y"].size[2])
        tx, fused = s[load].split(fused, nparts=cfg["tile_x"].size[2])
        s[load].bind(tz, te.thread_axis("threadIdx.z"))
        s[load].bind(ty, te.thread_axis("threadIdx.y"))
        s[load].bind(tx, te.thread_axis("threadIdx.x"))

    # tune unroll
    s[output].pragma(kernel_scope, "auto_unroll_max_step", cfg["auto_unroll_max_step"].val)
    s[output].pragma(kernel_scope, "unroll_explicit", cfg["unroll_explicit"].val)

    return s, [raw_data, kernel, conv]


# -- Step 2: search through the space ---------------------------------------------------------

TUNERS = {
    "xgb": lambda task, seed: autotvm.tuner.XGBTuner(task, seed=seed),
    "random": lambda task, seed: autotvm.tuner.RandomTuner(task, seed=seed),
    "ga": lambda task, seed: autotvm.tuner.GATuner(task, seed=seed),
    "grid": lambda task, seed: autotvm.tuner.GridSearchTuner(task),
}


def gpu_present() -> bool:
    try:
        ptxforge.cuda(0)
        return True
    except Exception:  # no driver, no GPU: the simulator stands in
        return False


def make_measure_option(runner: str, max_sim_seconds: float) -> dict:
    if runner == "gpu":
        # measure 3 times per config to reduce variance; compile within 10 s, run within 4 s
        return autotvm.measure_option(
            builder=autotvm.LocalBuilder(),
            runner=autotvm.LocalRunner(repeat=3, min_repeat_ms=100, timeout=4),
        )
    return autotvm.measure_option(
        builder="local", runner=autotvm.SimRunner(max_sim_seconds=max_sim_seconds))


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runner", choices=("sim", "gpu"), default=None,
                   help="gpu: time on the GPU; sim: simulator checks and estimated times "
                        "(default: gpu when one is present)")
    p.add_argument("--trials", type=int, default=20, help="configs to measure (default 20)")
    p.add_argument("--tuner", choices=sorted(TUNERS), default="xgb")
    p.add_argument("--log", default="conv2d.log", help="record file (appended to)")
    p.add_argument("--seed", type=int, default=2, help="seed of the tuner (default 2)")
    p.add_argument("--max-sim-seconds", type=float, default=3.0,
                   help="simulate a kernel only when that is estimated to take at most this")
    p.add_argument("--quiet", action="store_true",
                   help="a progress bar instead of one line per trial")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    runner = args.runner or ("gpu" if gpu_present() else "sim")
    if runner == "gpu" and not gpu_present():
        print("--runner gpu needs an NVIDIA GPU and its driver; none was found "
              "(use --runner sim)", file=sys.stderr)
        return 2

    # logging config (for printing tuning log to screen)
    log = logging.getLogger("autotvm")
    if not args.quiet:
        log.setLevel(logging.DEBUG)
        log.addHandler(logging.StreamHandler(sys.stdout))

    # the last layer in resnet
    N, H, W, CO, CI, KH, KW, strides, padding = 1, 7, 7, 512, 512, 3, 3, (1, 1), (1, 1)
    task = autotvm.task.create(
        "tutorial/conv2d_no_batching", args=(N, H, W, CO, CI, KH, KW, strides, padding),
        target="cuda")
    print(task.config_space)

    measure_option = make_measure_option(runner, args.max_sim_seconds)
    if runner == "sim":
        print("No GPU measurements: candidates are checked on the simulator (when small "
              "enough) and their times are ESTIMATED by an analytical model of an H100.")
    else:
        print("Get devices for measurement successfully!")

    # begin tuning, log records to file `conv2d.log`; many configs are invalid, and those
    # show up as errors: as long as some have non-zero GFLOPS, it is okay
    tuner = TUNERS[args.tuner](task, args.seed)
    if os.path.exists(args.log):
        # resume: the configs already in the log are not measured again
        history = list(autotvm.record.load_from_file(args.log))
        tuner.load_history(history)
        print(f"resuming from {args.log}: {len(history)} records, their configs are not "
              "measured again")
    callbacks = [autotvm.callback.log_to_file(args.log)]
    if args.quiet:
        callbacks.append(autotvm.callback.progress_bar(args.trials))
    t0 = time.time()
    tuner.tune(n_trial=args.trials, measure_option=measure_option, callbacks=callbacks)
    print(f"Tuned {args.trials} trials in {time.time() - t0:.1f} s "
          f"({measure_option['builder'].stage_summary()})")

    # -- Step 3: the best config from the log: check it and time it --------------------------
    dispatch_context = autotvm.apply_history_best(args.log)
    best_config = dispatch_context.query(task.target, task.workload)
    print("\nBest config:")
    print(best_config)
    if best_config.is_fallback:
        print("(no valid config in the log yet: the template's defaults are used; run more "
              "trials)")

    target = "cuda" if runner == "gpu" else "sim"
    with autotvm.apply_history_best(args.log):
        s, arg_bufs = conv2d_no_batching(N, H, W, CO, CI, KH, KW, strides, padding)
        func = ptxforge.build(s, arg_bufs, target=target)

    a_np = np.random.uniform(size=(N, CI, H, W)).astype(np.float32)
    w_np = np.random.uniform(size=(CO, CI, KH, KW)).astype(np.float32)
    c_np = conv2d_nchw_python(a_np, w_np, strides, padding)

    if runner == "gpu":
        dev = ptxforge.cuda(0)
        a_dev = ptxforge.nd.array(a_np, dev)
        w_dev = ptxforge.nd.array(w_np, dev)
        c_dev = ptxforge.nd.empty(c_np.shape, "float32", dev)
        func(a_dev, w_dev, c_dev)
        np.testing.assert_allclose(c_np, c_dev.numpy(), rtol=1e-2)
        print("The result matches numpy (rtol 1e-2).")
        # a large number of runs reduces noise and the launch overhead
        evaluator = func.time_evaluator(func.entry_name, dev, number=400)
        print(f"Time cost of this operator: {evaluator(a_dev, w_dev, c_dev).mean:f}")
        return 0

    from ptxforge.measure.estimate import module_seconds, simulation_seconds
    from ptxforge.measure.kernel_stats import analyze_module

    stats = analyze_module(func.device_module)
    sim = simulation_seconds(stats)
    if sim <= args.max_sim_seconds:
        c_out = np.empty(c_np.shape, np.float32)
        func(a_np, w_np, c_out)
        np.testing.assert_allclose(c_np, c_out, rtol=1e-2)
        print("The result matches numpy on the simulator (rtol 1e-2).")
    else:
        print(f"Correctness not checked here: simulating this kernel would take about "
              f"{sim:.0f} s (limit {args.max_sim_seconds:g} s; raise --max-sim-seconds).")
    print(f"Time cost of this operator (ESTIMATED by the model, not measured): "
          f"{module_seconds(stats):f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

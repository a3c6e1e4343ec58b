"""Compile latency of the seed layer, stage by stage, on one CPU core (no GPU needed).

For the tutorial's seed schedule and the default schedule of the same layer (conv + bias +
relu): building the schedule with the te API (which applies its passes), lowering to
device IR, generating LLVM IR, parsing it, LLVM's O3, PTX emission and assembling the cubin
(ptxas). Each figure is the median over ``--runs`` runs after one warm-up run; the kernel
cache is bypassed so every run compiles from scratch.

    python3 bench/bench_compile.py [--runs 5] [--core 0] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import ptxforge
from ptxforge import workloads
from ptxforge.backend_ptx import compile_kernel, find_ptxas
from ptxforge.ops.schedules import default_schedule

STAGES = ("schedule", "lower", "llvm_ir", "llvm_parse", "llvm_opt", "ptx", "cubin")
DESCRIPTION = {
    "schedule": "build the schedule (te API, passes applied)",
    "lower": "lower to device IR",
    "llvm_ir": "generate LLVM IR",
    "llvm_parse": "parse and verify LLVM IR",
    "llvm_opt": "LLVM O3",
    "ptx": "emit PTX",
    "cubin": "assemble cubin",
}
# compile_kernel's names for the backend stages
BACKEND = {"llvm_ir": "llvm_ir", "llvm_parse": "parse", "llvm_opt": "llvm_opt", "ptx": "ptx",
           "cubin": "cubin"}


def seed():
    s, tensors, _ = workloads.seed_schedule()
    return s, tensors


def default():
    data, kernel, bias, out = workloads.conv2d_layer(*workloads.SEED_ARGS)
    return default_schedule(out), [data, kernel, bias, out]


SCHEDULES = {"seed schedule": seed, "default schedule": default}


def one_run(make, target: str) -> dict:
    """Seconds per stage of one compile from scratch."""
    t = {}
    t0 = time.perf_counter()
    s, tensors = make()
    s.module  # noqa: B018 - applies the primitives the schedule still holds back
    t["schedule"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    module = ptxforge.lower(s, tensors)
    t["lower"] = time.perf_counter() - t0
    for stage in BACKEND:
        t[stage] = 0.0
    for kernel in module.kernels():
        compiled = compile_kernel(kernel, target, cache=False)
        for stage, key in BACKEND.items():
            t[stage] += compiled.stage_seconds.get(key, 0.0)
    return t


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=5, help="timed runs per schedule (median)")
    p.add_argument("--core", type=int, default=0, help="the CPU core to run on")
    p.add_argument("--target", default="sm_90", help="the GPU architecture compiled for")
    p.add_argument("--json", help="write the figures to this JSON file")
    args = p.parse_args(argv)

    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.core})
    ptxas = find_ptxas()
    print(f"device: {cpu_name()} (one core: {args.core}), compiling for {args.target} "
          f"with {ptxas or 'no ptxas (the cubin stage is skipped)'}")
    print(f"seed layer, median of {args.runs} runs after one warm-up, milliseconds\n")

    medians: dict = {}
    for name, make in SCHEDULES.items():
        one_run(make, args.target)  # warm-up: imports, target machine, caches of the IR
        runs = [one_run(make, args.target) for _ in range(args.runs)]
        medians[name] = {st: statistics.median(r[st] for r in runs) * 1e3 for st in STAGES}
        medians[name]["total"] = sum(medians[name][st] for st in STAGES)

    names = list(SCHEDULES)
    head = f"{'stage':<48}" + "".join(f"{n:>18}" for n in names)
    print(head)
    print("-" * len(head))
    for st in STAGES + ("total",):
        label = DESCRIPTION.get(st, "total")
        print(f"{label:<48}" + "".join(f"{medians[n][st]:>18.1f}" for n in names))

    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": cpu_name(), "core": args.core, "target": args.target,
                       "ptxas": ptxas, "runs": args.runs, "unit": "ms",
                       "stages": medians}, f, indent=2)
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What a lighter LLVM pipeline saves in compile time, and what it costs in kernel speed.

Builders optimize every kernel with LLVM's O3 pipeline (``backend_ptx.compile.optimize``), a
good part of a candidate's build; emitting PTX from the optimized module and ptxas follow. This
script compiles the same kernels with lighter pipelines (the new pass manager at speed levels 1
and 2, or O3 without loop unrolling or without the loop vectorizer) next to O3, and reports per
pipeline the CPU time of the optimization, of PTX emission and of ptxas, the registers and
spills ptxas reports, and with ``--time`` (on a GPU) the kernels' run time, each candidate
timed under every pipeline in the same process; for each pipeline it counts the kernels whose
PTX is byte for byte the first pipeline's (only such a pipeline can replace O3 without a GPU
run). The kernels are those the auto-scheduler measures first: states of the sm_90a sketches
(tensor-core, wgmma and CUDA-core) of the fp16 tasks of BERT and ResNet-18.

    PYTHONPATH=<parent of the checkout> python3 bench/llvm_opt_cost.py [--states 8]
        [--tasks bert:1,bert:2,resnet-18:3] [--time] [--json out.json]

Without ptxas (``PTXFORGE_PTXAS`` or on ``PATH``) the script stops after PTX emission. The
production build is not changed by this script: it is the evidence for (or against) a
lighter pipeline. ``build`` is the pipeline builders run (``backend_ptx.compile.optimize``:
O3 without the loop vectorizer since the figures of this script showed it makes the same
PTX); ``O3`` the full pipeline it replaced. ``codegen-O2`` optimizes as ``build`` does but
emits PTX from a target machine at level 2 (NVPTX then runs EarlyCSE where level 3 runs
GVN, twice). ``--wide`` samples the tasks of four networks (ResNet-18, ResNet-50,
MobileNetV2, BERT: depthwise, pointwise and 3x3 convolutions, dense layers, batch products,
softmax, pooling, casts). ``--code`` compares, where the PTX differs, the cubins' code
(every ELF section but ``.note.nv.tkinfo``, which records ptxas's command line): a
pipeline whose PTX differs may still make the same machine code.

    python3 bench/llvm_opt_cost.py --wide --states 6 --pipelines build,O3,codegen-O2 --code
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

PIPELINES = {
    "build": {"production": True},
    "O3": {"speed_level": 3, "unroll": True},
    "O3-no-loop-vectorize": {"speed_level": 3, "unroll": True, "loop_vectorize": False},
    "O3-no-unroll": {"speed_level": 3, "unroll": False},
    "O2": {"speed_level": 2, "unroll": True},
    "O1": {"speed_level": 1, "unroll": True},
    "O3-no-slp": {"speed_level": 3, "unroll": True, "loop_vectorize": False, "slp": False},
    "codegen-O2": {"production": True, "codegen_level": 2},
}
"""``O3-no-loop-vectorize``: O3 without the loop vectorizer and interleaving. NVPTX gives
the vectorizer 32-bit registers, so it can only pair 16-bit values (``<2 x half>``) in loops
LLVM does not unroll fully; on the candidates measured the PTX is identical to O3's.
``build``: what builders run. ``O3-no-slp``: without pairing 16-bit operations either.
``codegen-O2``: ``build``'s module, PTX emitted at codegen level 2."""

WIDE_TASKS = ("resnet-18:3,resnet-18:8,resnet-50:2,resnet-50:4,resnet-50:9,resnet-50:33,"
              "mobilenet_v2:0,mobilenet_v2:2,mobilenet_v2:7,mobilenet_v2:25,"
              "bert:1,bert:2,bert:4,bert:7")
"""Tasks of four networks (``--wide``), every kind of sketch among them."""


def optimize_with(module, sm: str, speed_level: int, unroll: bool, pair_halves: bool,
                  loop_vectorize: bool = True) -> None:
    """``backend_ptx.compile.optimize`` with another speed level, without unrolling or
    without the loop vectorizer."""
    from ptxforge.backend_ptx.compile import llvm_binding, target_machine

    llvm = llvm_binding()
    pto = llvm.create_pipeline_tuning_options(speed_level=speed_level)
    pto.loop_unrolling = unroll
    pto.slp_vectorization = pair_halves
    pto.loop_vectorization = loop_vectorize
    pto.loop_interleaving = loop_vectorize
    pb = llvm.create_pass_builder(target_machine(sm), pto)
    pb.getModulePassManager().run(module, pb)


_CODEGEN_MACHINES: dict = {}


def codegen_machine(sm: str, level: int):
    """A target machine for ``sm`` at codegen level ``level`` (3 is the builders')."""
    from ptxforge.backend_ptx.compile import llvm_binding, target_machine

    if level == 3:
        return target_machine(sm)
    key = (sm, level)
    if key not in _CODEGEN_MACHINES:
        from ptxforge.backend_ptx import nvptx

        target = llvm_binding().Target.from_triple(nvptx.TRIPLE)
        _CODEGEN_MACHINES[key] = target.create_target_machine(cpu=sm, opt=level)
    return _CODEGEN_MACHINES[key]


def compile_with(func, sm: str, pipeline: dict, assemble: bool) -> tuple:
    """(CompiledKernel or None, {stage: CPU seconds}, PTX) of ``func`` through
    ``pipeline``."""
    from ptxforge.backend_ptx.compile import (
        _HALF_TYPES,
        compile_kernel,
        optimize,
        parse_llvm,
    )

    ir = compile_kernel(func, sm, stop_after="llvm_ir", cache=False).sources["llvm_ir"]
    secs = {}
    module = parse_llvm(ir, func.name)
    halves = bool(_HALF_TYPES.search(ir))
    t = time.process_time()
    if pipeline.get("production"):
        optimize(module, sm, pair_halves=halves)
    else:
        optimize_with(module, sm, pipeline["speed_level"], pipeline["unroll"],
                      halves and pipeline.get("slp", True),
                      pipeline.get("loop_vectorize", True))
    secs["opt"] = time.process_time() - t
    t = time.process_time()
    ptx = codegen_machine(sm, pipeline.get("codegen_level", 3)).emit_assembly(module)
    secs["ptx"] = time.process_time() - t
    if not assemble:
        return None, secs, ptx
    t = time.perf_counter()  # ptxas runs in a child process: wall time
    kernel = compile_kernel(func, sm, replace={"ptx": ptx}, stop_after="cubin",
                            assembler="ptxas", cache=False)
    secs["ptxas"] = time.perf_counter() - t
    return kernel, secs, ptx


def code_sections(cubin: bytes) -> dict:
    """``{name: bytes}`` of a cubin's ELF sections (64-bit little-endian, as ptxas writes
    them), without ``.note.nv.tkinfo``, which records the assembler's command line."""
    import struct

    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    entsize, count, names = struct.unpack_from("<HHH", cubin, 0x3A)
    heads = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * entsize)
             for i in range(count)]
    strtab = heads[names][4]
    out = {}
    for h in heads:
        name = cubin[strtab + h[0]:cubin.index(b"\0", strtab + h[0])].decode()
        out[name] = b"" if h[1] == 8 else cubin[h[4]:h[4] + h[5]]  # 8: no bits (.bss)
    out.pop(".note.nv.tkinfo", None)
    return out


def time_on_gpu(artifact, dev, repeat: int = 5) -> float:
    """The median of ``repeat`` graph-timed runs (seconds) of a built candidate."""
    import numpy as np
    from ptxforge.backend_ptx import array
    from ptxforge.measure.check import random_array

    module = artifact.host_module()
    rng = np.random.default_rng(0)
    arrays = [array(random_array(p, rng), dev) for p in module.host.params]
    loaded = artifact.ptx_module(module).load(dev)
    ev = loaded.time_evaluator("main", dev, number=10, repeat=repeat, min_repeat_ms=5,
                               graph=True)
    res = ev(*arrays)
    dev.sync()
    return statistics.median(res.results)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--states", type=int, default=8)
    ap.add_argument("--tasks", default="bert:1,bert:2,resnet-18:3")
    ap.add_argument("--wide", action="store_true",
                    help="the tasks of four networks (WIDE_TASKS) instead of --tasks")
    ap.add_argument("--code", action="store_true",
                    help="where the PTX differs, compare the cubins' code sections")
    ap.add_argument("--pipelines", default=",".join(PIPELINES))
    ap.add_argument("--time", action="store_true", help="time the kernels on the GPU")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write every candidate's figures here")
    args = ap.parse_args(argv)
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    import ptxforge
    from ptxforge import autosched
    from ptxforge.autosched.state import State, candidate_input
    from ptxforge.backend_ptx.assemble import find_ptxas
    from ptxforge.measure.artifact import BuildArtifact
    from ptxforge.measure.build import BuildOptions, build_candidate
    from trial_cost import tasks_of

    names = args.pipelines.split(",")
    unknown = [n for n in names if n not in PIPELINES]
    if unknown:
        ap.error(f"unknown pipelines {unknown}; choose from {list(PIPELINES)}")
    assemble = find_ptxas() is not None
    if args.time and not assemble:
        ap.error("--time needs ptxas (the GPU runs cubins)")
    dev = ptxforge.cuda(0) if args.time else None
    sm = "sm_90a"
    rows_out = []
    totals = {n: {"opt": 0.0, "ptx": 0.0, "ptxas": 0.0, "time": [], "regs": 0, "spills": 0,
                  "same_ptx": 0, "same_code": 0}
              for n in names}
    if args.code and not assemble:
        ap.error("--code needs ptxas")
    tasks = WIDE_TASKS if args.wide else args.tasks
    n_kernels = 0
    for label, task in tasks_of(tasks, "cuda -arch=sm_90a"):
        policy = autosched.SketchPolicy(task, autosched.RandomModel(seed=args.seed),
                                        seed=args.seed, verbose=0)
        for r in policy.search_one_round(args.states):
            st = State.from_row(r, task)
            res = build_candidate(candidate_input(task, st),
                                  BuildOptions(target_sm=sm, compile_to="ir"))
            if res.error_no:
                continue
            art = res.artifact
            row = {"task": label, "sketch": task.sketches[st.sketch].name}
            first: dict = {}  # kernel name -> (PTX, code) under the first pipeline
            n_kernels += len(list(art.module.kernels()))
            for n in names:
                kernels, secs = {}, {"opt": 0.0, "ptx": 0.0, "ptxas": 0.0}
                same = same_code = 0
                for f in art.module.kernels():
                    k, s, ptx = compile_with(f, sm, PIPELINES[n], assemble)
                    kernels[f.name] = k
                    code = code_sections(k.cubin) if args.code else None
                    ref_ptx, ref_code = first.setdefault(f.name, (ptx, code))
                    same += ref_ptx == ptx
                    same_code += ref_ptx == ptx or (code is not None and ref_code == code)
                    for key, v in s.items():
                        secs[key] += v
                row[n] = dict(secs, same_ptx=same, same_code=same_code)
                totals[n]["same_ptx"] += same
                totals[n]["same_code"] += same_code
                for key, v in secs.items():
                    totals[n][key] += v
                if assemble:
                    regs = max(k.resources.registers for k in kernels.values())
                    spills = sum(k.resources.spill_store_bytes for k in kernels.values())
                    row[n].update(registers=regs, spill_bytes=spills)
                    totals[n]["regs"] += regs
                    totals[n]["spills"] += spills
                if dev is not None:
                    built = BuildArtifact(art.module, kernels, art.stats, art.output_params, sm)
                    row[n]["seconds"] = time_on_gpu(built, dev)
            if dev is not None:
                for n in names:
                    totals[n]["time"].append(row[n]["seconds"] / row[names[0]]["seconds"])
            rows_out.append(row)
            print(f"{label[:28]:28s} {row['sketch'][:28]:28s} " + "  ".join(
                f"{n}: opt {1e3 * row[n]['opt']:.0f} ptx {1e3 * row[n]['ptx']:.0f}"
                + (f" ptxas {1e3 * row[n]['ptxas']:.0f} regs {row[n]['registers']}"
                   if assemble else "")
                + (f" {1e6 * row[n]['seconds']:.1f} us" if dev is not None else "")
                for n in names), flush=True)
    count = max(len(rows_out), 1)
    print(f"\nmean per candidate over {len(rows_out)} candidates (CPU ms; ptxas wall ms)")
    for n in names:
        t = totals[n]
        line = (f"  {n:20s} opt {1e3 * t['opt'] / count:7.1f}  ptx {1e3 * t['ptx'] / count:7.1f}"
                f"  PTX as {names[0]}'s: {t['same_ptx']} of {n_kernels} kernels")
        if args.code:
            line += f" (machine code: {t['same_code']})"
        if assemble:
            line += (f"  ptxas {1e3 * t['ptxas'] / count:7.1f}  max registers "
                     f"{t['regs'] / count:5.1f}  spill bytes {t['spills'] / count:6.1f}")
        if t["time"]:
            gm = statistics.geometric_mean(t["time"])
            line += f"  kernel time vs {names[0]}: geomean {gm:.3f}x, worst {max(t['time']):.3f}x"
        print(line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows_out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

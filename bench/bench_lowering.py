"""Lowering cost per kernel, and a byte-for-byte check of the device IR it produces.

For each schedule of ``bench/lowering_corpus.py``: apply the schedule, then lower it as a
builder does (no verifier after each pass) ``--runs`` times and report the least CPU ms of
this process (the least is the figure least disturbed by other work on the machine);
optionally the backend stages too (LLVM IR, O3, PTX; no ptxas). ``--save DIR`` writes each
kernel's device IR text to ``DIR/<name>.ir``; ``--check DIR`` compares against those files
and exits 1 on any difference (showing the first differing line), so a change meant only to
make lowering faster can be shown to produce the same kernels. ``--fixtures DIR`` writes,
for the selected schedules, the scheduled IR as text (``<name>.scheduled.ir``) and the
device IR its parsed form lowers to (``<name>.device.ir``): the inputs and expected outputs
of ``tests/test_lowering_identity.py``, regenerated (with ``--only``) when a lowering change
is meant to change kernels. ``--profile N`` prints the top N functions of a cProfile run
over the whole corpus. ``--ops`` counts the Python bytecode operations each kernel's
lowering executes (a traced run, about 50x slower), per kernel and per pass: unlike time,
the count does not depend on the machine's load, so two versions compare exactly.

    python3 bench/bench_lowering.py [--runs 3] [--only seed,dense] [--backend]
        [--save DIR | --check DIR] [--fixtures DIR] [--profile 30] [--ops]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from lowering_corpus import CORPUS  # noqa: E402
from ptxforge import stages  # noqa: E402
from ptxforge.ir.simplify_cache import simplify_cache  # noqa: E402
from ptxforge.passes import PassContext  # noqa: E402
from ptxforge.passes.lower import lowering_pipeline  # noqa: E402
from ptxforge.target import as_target  # noqa: E402


def scheduled(name: str):
    """(target, scheduled module, argument order) of one corpus entry."""
    from ptxforge.driver import scheduled_module

    target, make = CORPUS[name]
    target = as_target(target)
    with target:
        s, tensors = make()
        return target, scheduled_module(s, tensors)


def lower(target, module):
    with target:
        return lowering_pipeline()(module, PassContext(verify=False))


def count_ops(target, module) -> dict:
    """Python bytecode operations executed by each pass of lowering ``module`` (as
    :func:`lower` does), by pass name."""
    counts: dict = {}
    n = 0

    def local(frame, event, arg):
        nonlocal n
        if event == "opcode":
            n += 1
        return local

    def trace(frame, event, arg):
        frame.f_trace_opcodes = True
        return local

    pipeline = lowering_pipeline()
    ctx = PassContext(verify=False)
    # as LoweringPipeline.__call__ does: one simplifier cache for the whole run
    with target, ctx, simplify_cache():
        for p in pipeline.passes:
            n = 0
            sys.settrace(trace)
            try:
                module = ctx.run_pass(p, module)
            finally:
                sys.settrace(None)
            counts[p.name] = counts.get(p.name, 0) + n
    return counts


def backend_ms(target, device) -> dict:
    from ptxforge.backend_ptx import compile_kernel

    with stages.collect() as times:
        for k in device.kernels():
            compile_kernel(k, target, stop_after="ptx", cache=False)
    return {k: v * 1e3 for k, v in times.items()}


def write_fixtures(folder: str, inputs: dict) -> None:
    """The scheduled IR text of each input and the device IR its parsed form lowers to, and
    the target of each in ``targets.json``."""
    import json

    from ptxforge.ir.parser import parse_module

    os.makedirs(folder, exist_ok=True)
    manifest = os.path.join(folder, "targets.json")
    targets = {}
    if os.path.exists(manifest):
        with open(manifest) as f:
            targets = json.load(f)
    for n, (target, module) in inputs.items():
        targets[n] = CORPUS[n][0]
        text = str(module)
        device = lower(target, parse_module(text))
        for suffix, out in ((".scheduled.ir", text), (".device.ir", str(device))):
            with open(os.path.join(folder, n + suffix), "w") as f:
                f.write(out)
    with open(manifest, "w") as f:
        json.dump(dict(sorted(targets.items())), f, indent=1)
        f.write("\n")


def first_difference(a: str, b: str) -> str:
    la, lb = a.splitlines(), b.splitlines()
    for i, (x, y) in enumerate(zip(la, lb)):
        if x != y:
            return f"line {i + 1}:\n  expected: {x}\n  got:      {y}"
    return f"lengths differ: {len(la)} vs {len(lb)} lines"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", default="", help="comma-separated substrings of names")
    ap.add_argument("--backend", action="store_true", help="also time LLVM IR, O3 and PTX")
    ap.add_argument("--save", metavar="DIR")
    ap.add_argument("--check", metavar="DIR")
    ap.add_argument("--fixtures", metavar="DIR")
    ap.add_argument("--profile", type=int, default=0, metavar="N")
    ap.add_argument("--ops", action="store_true",
                    help="count the Python operations of each kernel's lowering, per pass")
    args = ap.parse_args(argv)
    names = [n for n in CORPUS if not args.only or any(p in n for p in args.only.split(","))]
    inputs = {n: scheduled(n) for n in names}
    failed = 0
    total: dict = {}
    print(f"{'kernel':42s} {'lower ms':>9s}" + ("  backend ms per stage" if args.backend else ""))
    for n in names:
        target, module = inputs[n]
        device = lower(target, module)  # warm-up (and the text checked)
        times = []
        for _ in range(args.runs):
            t0 = time.process_time()
            lower(target, module)
            times.append((time.process_time() - t0) * 1e3)
        ms = min(times)
        total["lower"] = total.get("lower", 0.0) + ms
        line = f"{n:42s} {ms:9.1f}"
        if args.backend:
            b = backend_ms(target, device)
            stages.merge(total, b)
            line += "  " + "  ".join(f"{k} {v:.1f}" for k, v in b.items())
        text = str(device)
        if args.save:
            os.makedirs(args.save, exist_ok=True)
            with open(os.path.join(args.save, n + ".ir"), "w") as f:
                f.write(text)
        if args.check:
            with open(os.path.join(args.check, n + ".ir")) as f:
                want = f.read()
            if want != text:
                failed += 1
                line += "  DIFFERENT: " + first_difference(want, text)
            else:
                line += "  identical"
        print(line, flush=True)
    print(f"{'total':42s} " + "  ".join(f"{k} {v:.1f}" for k, v in total.items()))
    if args.fixtures:
        write_fixtures(args.fixtures, {n: inputs[n] for n in names})
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        for n in names:
            lower(*inputs[n])
        prof.disable()
        pstats.Stats(prof).sort_stats("cumulative").print_stats(args.profile)
        pstats.Stats(prof).sort_stats("tottime").print_stats(args.profile)
    if args.ops:
        per_pass: dict = {}
        print(f"{'kernel':42s} {'M ops':>8s}")
        for n in names:
            counts = count_ops(*inputs[n])
            stages.merge(per_pass, counts)
            print(f"{n:42s} {sum(counts.values()) / 1e6:8.3f}", flush=True)
        print(f"{'total':42s} {sum(per_pass.values()) / 1e6:8.3f}")
        for p, c in sorted(per_pass.items(), key=lambda kv: -kv[1]):
            print(f"  {p:40s} {c / 1e6:8.3f}")
    if failed:
        print(f"{failed} kernel(s) differ from {args.check}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""Would one ptxas process for several candidates build the same machine code, cheaper?

Builders assemble each candidate with one ptxas process (all its kernels at once). This
script takes the candidates of ``bench/candidate_corpus.py`` (compiled to PTX), gives each
candidate's kernels a prefix of their own (``c7_main_kernel0``; kernels of different
candidates share names) and assembles them both ways: one ptxas per candidate, and one
ptxas per group of ``--group`` candidates (a tuning round's builds). It reports ptxas's
wall and CPU time per candidate both ways, and compares, kernel by kernel, the machine code
(the ELF section ``.text.<kernel>``, with the symbol names aside) and the resource report.

    PYTHONPATH=<parent of the checkout> python3 bench/ptxas_batch.py [--group 8]
        [--only resnet-18:3,bert:1]

ptxas must be found (``PTXFORGE_PTXAS`` or ``PATH``). The production build is not changed by
this script; it is the evidence for (or against) batching candidates.
"""

from __future__ import annotations

import argparse
import os
import re
import struct
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def elf_sections(blob: bytes) -> dict[str, bytes]:
    """``{section name: bytes}`` of a 64-bit little-endian ELF file (a cubin)."""
    if blob[:4] != b"\x7fELF" or blob[4] != 2:
        raise ValueError("not a 64-bit ELF file")
    shoff, = struct.unpack_from("<Q", blob, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", blob, 0x3A)
    heads = []
    for i in range(shnum):
        off = shoff + i * shentsize
        name, _type, _flags, _addr, offset, size = struct.unpack_from("<IIQQQQ", blob, off)
        heads.append((name, _type, offset, size))
    strtab = heads[shstrndx]
    names = blob[strtab[2]: strtab[2] + strtab[3]]
    out = {}
    for name, typ, offset, size in heads:
        end = names.index(b"\0", name)
        data = b"" if typ == 8 else blob[offset: offset + size]  # NOBITS holds no bytes
        out[names[name:end].decode()] = data
    return out


def renamed(ptx: str, names: list[str], prefix: str) -> str:
    """``ptx`` with each of ``names`` (whole identifiers) prefixed."""
    for n in sorted(names, key=len, reverse=True):
        ptx = re.sub(rf"(?<![\w$]){re.escape(n)}(?![\w$])", prefix + n, ptx)
    return ptx


def _child_cpu() -> float:
    t = os.times()
    return t.children_user + t.children_system


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--only", default="")
    ap.add_argument("--show", action="store_true", help="print the reports that differ")
    args = ap.parse_args(argv)
    sys.path.insert(0, HERE)
    from candidate_corpus import build, load_candidates
    from ptxforge.backend_ptx.assemble import find_ptxas, parse_report, run_ptxas_many
    from ptxforge.backend_ptx.compile import _defined_names

    if find_ptxas() is None:
        print("ptxas was not found: set PTXFORGE_PTXAS or put CUDA's bin folder on PATH")
        return 1
    cands = []  # (name, [(kernel symbol, renamed PTX)])
    for k, (name, task, st) in enumerate(load_candidates(only=args.only)):
        res = build(task, st, "ptx")
        if res.error_no:
            continue
        prefix = f"c{k}_"
        kernels = []
        for kname in sorted(res.artifact.kernels):
            ptx = res.artifact.kernels[kname].sources["ptx"]
            kernels.append((prefix + kname, renamed(ptx, _defined_names(ptx), prefix)))
        cands.append((name, kernels))
    sm = "sm_90a"
    n = len(cands)
    n_kernels = sum(len(ks) for _, ks in cands)
    alone: dict = {}  # kernel -> (text section, report) assembled by a ptxas of its own
    groups = {"one ptxas per kernel": [[k] for _, ks in cands for k in ks],
              "one ptxas per candidate (as builders do)": [ks for _, ks in cands],
              f"one ptxas per {args.group} candidates": [
                  [k for _, ks in cands[g: g + args.group] for k in ks]
                  for g in range(0, n, args.group)]}
    for what, batches in groups.items():
        wall = cpu = 0.0
        same_code = same_report = 0
        for batch in batches:
            c0, t0 = _child_cpu(), time.perf_counter()
            cubin, log = run_ptxas_many([p for _, p in batch], sm)
            wall += time.perf_counter() - t0
            cpu += _child_cpu() - c0
            secs = elf_sections(cubin)
            for sym, _ in batch:
                got = (secs[".text." + sym], str(parse_report(log, sym)))
                ref = alone.setdefault(sym, got)
                same_code += got[0] == ref[0]
                same_report += got[1] == ref[1]
                if got[1] != ref[1] and args.show:
                    print(f"  {sym}: alone   {ref[1]}\n  {' ' * len(sym)}  batched {got[1]}")
        print(f"{what}: {1e3 * wall / n:.1f} ms wall, {1e3 * cpu / n:.1f} ms CPU per candidate "
              f"({n} candidates, {n_kernels} kernels); machine code as alone in {same_code}, "
              f"resource report in {same_report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

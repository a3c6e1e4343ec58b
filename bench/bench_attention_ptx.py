"""PTX instruction counts of the fused attention kernel's key loop (no GPU needed).

Builds the kernel for each configuration with the PTX backend (``cuda -arch=sm_90a`` by
default, ``--arch sm_80`` for the mma.sync form alone), finds the key loop (the
outermost loop of the PTX whose body holds the tensor-core products) and counts its
instructions: all of them, per score of the block's tile (``block_q x block_kv``), and by
kind (``ex2.approx``, shared loads and stores, barriers, shuffles, the products,
conversions, float arithmetic). ``loop`` is the loop's whole body (every branch: the
rare rescaling, the masked edge tiles); ``interior`` what a tile away from the diagonal
and the end runs (the kernel built without the rescaling and the edge tiles' masks, for
counting only). With two or three stages an iteration of the loop runs as many tiles
(each its own stage; the overlapped register form, ``--overlap``, two); the figures a score
divide by them. ``--json`` writes the rows.

    python3 bench/bench_attention_ptx.py [--seq 4096] [--causal] [--arch sm_90a] [--overlap]
        [--batch 1] [--mask none|key-f32|key-f16|key-bf16|key-bool] [--json out.json]

``--mask``: a padding mask over the keys as an imported BERT passes it, ``[B, 1, 1, S]``
(additive float32, float16 or bfloat16, or bool), for what the mask costs a score.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re

KINDS = {
    "ex2": r"^ex2\.",
    "mma": r"^(mma\.sync|wgmma\.mma_async)",
    "ld.global": r"^ld\.global",
    "ld.shared": r"^ld\.shared",
    "st.shared": r"^st\.shared",
    "ldmatrix": r"^ldmatrix",
    "cp.async": r"^cp\.async\.(ca|cg)",
    "bar": r"^(bar\.|barrier\.)",
    "shfl": r"^shfl\.",
    "cvt": r"^cvt\.",
    "fma/mul/add f32": r"^(fma|mul|add|sub)(\.rn)?\.f32",
    "max/min f32": r"^(max|min)(\.NaN)?\.f32",
    "setp/selp": r"^(setp|selp)\.",
}
"""Instruction kinds counted separately (regular expressions on the opcode)."""

MASKS = {"none": None, "key-f32": "float32", "key-f16": "float16", "key-bf16": "bfloat16",
         "key-bool": "bool"}
"""``--mask``: the padding mask's dtype."""

_LABEL = re.compile(r"^(\$L__BB\d+_\d+):")
_BRANCH = re.compile(r"\bbra(\.uni)?\s+(\$L__BB\d+_\d+);")


def instructions(ptx: str) -> list[str]:
    """The kernel's lines that are labels or instructions (directives, braces and
    comments dropped), stripped."""
    out = []
    for line in ptx.splitlines():
        s = line.split("//")[0].strip()
        if s.startswith("{") and s.endswith("}"):
            # an inline-asm block on one line (the wgmma products): its instructions
            out += [x.strip() for x in s[1:-1].split(";")
                    if x.strip() and not x.strip().startswith(".")]
            continue
        if not s or s.startswith((".", "{", "}", ")", "(")) or s.endswith(("(", ",")):
            continue
        out.append(s)
    return out


def is_instruction(s: str) -> bool:
    return not _LABEL.match(s)


def key_loop(lines: list[str]) -> tuple[int, int]:
    """``(first, last)`` line indices of the outermost loop whose body holds a tensor-core
    product: a backward branch to a label, the widest one around a product."""
    labels = {m.group(1): i for i, s in enumerate(lines) if (m := _LABEL.match(s))}
    best = None
    for i, s in enumerate(lines):
        m = _BRANCH.search(s)
        if not m or labels.get(m.group(2), i + 1) > i:
            continue
        lo = labels[m.group(2)]
        body = lines[lo:i + 1]
        if any(re.match(KINDS["mma"], b.lstrip("@!%p0123456789 ")) for b in body):
            if best is None or i - lo > best[1] - best[0]:
                best = (lo, i)
    if best is None:
        raise ValueError("no loop around a tensor-core product in the PTX")
    return best


def opcode(s: str) -> str:
    """The opcode of an instruction line (its predicate guard dropped)."""
    s = s.strip()
    if s.startswith("@"):
        s = s.split(None, 1)[1]
    return s


def count(ptx: str) -> dict:
    """Counts over the key loop's body: ``total`` and each of :data:`KINDS`."""
    lines = instructions(ptx)
    lo, hi = key_loop(lines)
    body = [opcode(s) for s in lines[lo:hi + 1] if is_instruction(s)]
    row = {"total": len(body), "kernel_total": sum(map(is_instruction, lines))}
    for kind, pat in KINDS.items():
        row[kind] = sum(1 for s in body if re.match(pat, s))
    return row


def tiles_per_iteration(cfg) -> int:
    """Key tiles one iteration of the key loop runs: as many as the stages (each tile its
    stage, known to the code; for a problem of at least that many tiles)."""
    return cfg.stages


def interior_ptx(w, cfg, target) -> str:
    """The PTX of the kernel as an interior tile runs it: without the rare rescaling of
    the output and without the masks of the edge tiles (not a correct kernel: for
    counting the common path only)."""
    from unittest import mock

    from ptxforge.backend_ptx import compile_module
    from ptxforge.ir.stmt import Seq
    from ptxforge.ops.schedules.attention import attention_module
    from ptxforge.ops.schedules.attention.kernel import _Kernel
    from ptxforge.ops.schedules.attention.kernel_wgmma import WgmmaKernel
    from ptxforge.ops.schedules.attention.kernel_wgmma_regs import RegisterScoresKernel

    with mock.patch.object(_Kernel, "edge_tile", lambda self, tile: None), \
            mock.patch.object(_Kernel, "rescale", lambda self: Seq([])), \
            mock.patch.object(WgmmaKernel, "flush", lambda self: Seq([])), \
            mock.patch.object(RegisterScoresKernel, "rescale_output",
                              lambda self, tiles: None):
        return compile_module(attention_module(w, cfg), target).get_source("ptx")


def main() -> None:
    from ptxforge.backend_ptx import compile_module
    from ptxforge.ops.schedules.attention import (
        AttentionMask,
        AttentionWorkload,
        attention_module,
    )
    from ptxforge.ops.schedules.attention.knobs import (
        attention_candidates,
        choose_attention_config,
    )
    from ptxforge.target import as_target

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--all", action="store_true", help="every candidate, not only the chosen")
    ap.add_argument("--overlap", action="store_true",
                    help="also the overlapped register form's configurations (overlap='intra')")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--mask", default="none", choices=tuple(MASKS))
    ap.add_argument("--json")
    a = ap.parse_args()
    target = as_target(f"cuda -arch={a.arch}")
    w = AttentionWorkload(a.batch, a.heads, a.heads, a.seq, a.seq, a.dim, a.dim, a.dtype,
                          a.causal)
    if MASKS[a.mask] is not None:
        w = dataclasses.replace(w, mask=AttentionMask((a.batch, 1, 1, a.seq), MASKS[a.mask]))
    chosen = choose_attention_config(w, target)
    cfgs = attention_candidates(w, target) if a.all else [chosen]
    if a.overlap and target.has_wgmma:
        from ptxforge.ops.schedules.attention.knobs_wgmma import overlap_candidates

        cfgs += overlap_candidates(w, target)
    rows = []
    for cfg in cfgs:
        ptx = compile_module(attention_module(w, cfg), target).get_source("ptx")
        row = count(ptx)
        inner = count(interior_ptx(w, cfg, target))
        # scores a thread takes an iteration of the loop
        per_thread = cfg.block_q * cfg.block_kv / cfg.threads * tiles_per_iteration(cfg)
        row.update(config=str(cfg), per_score=round(row["total"] / per_thread, 3),
                   chosen=cfg == chosen, interior=inner,
                   interior_per_score=round(inner["total"] / per_thread, 3))
        rows.append(row)
        kinds = " ".join(f"{k}={inner[k]}" for k in KINDS)
        print(f"{cfg}: loop {row['total']} instructions a thread ({row['per_score']} a "
              f"score), kernel {row['kernel_total']}; interior tile {inner['total']} "
              f"({row['interior_per_score']} a score): {kinds}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()

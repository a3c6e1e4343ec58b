"""Shared-memory bank conflicts of the fused attention kernel, computed from its device IR
(:mod:`ptxforge.ops.schedules.attention.banks`): the float32 score and output tiles (the
accumulators' stores and loads, the softmax's reads, the rescaling and the flush), the
probabilities' writes and the per-row and per-warp values are 1-way in both forms; the
former padding (rows 4 words apart) is caught as 2-way; the barriers per key tile."""

from __future__ import annotations

import pytest

from ptxforge.ir.stmt import Barrier, For, walk
from ptxforge.ops.schedules.attention import (
    AttentionConfig,
    AttentionWorkload,
    attention_module,
    knobs,
    knobs_wgmma,
)
from ptxforge.ops.schedules.attention.banks import bank_ways, shared_access_ways


def _kernel(w, cfg):
    return attention_module(w, cfg).kernels()[0]


def _w(e=64, length=128, causal=True, heads=1):
    return AttentionWorkload(1, heads, heads, length, length, e, e, "float16", causal)


CASES = [
    (_w(), AttentionConfig(8, 64, 1, "wgmma")),
    (_w(128, 192), AttentionConfig(4, 64, 3, "wgmma")),
    (_w(64, 160, causal=False), AttentionConfig(4, 128, 2, "wgmma")),
    (_w(128), AttentionConfig(4, 64, 2)),
    (_w(80, 64), AttentionConfig(2, 16, 1)),
    (_w(64, 96, causal=False), AttentionConfig(4, 32, 2)),
]


def test_bank_ways_of_known_patterns():
    # 32 lanes, consecutive words: one pass
    assert bank_ways([(4 * i, 4) for i in range(32)]) == 1
    # a column of a 32-word-wide float32 tile: every lane in bank 0
    assert bank_ways([(128 * i, 4) for i in range(32)]) == 32
    # lanes sharing a word share it (16-bit neighbours, a broadcast)
    assert bank_ways([(2 * i, 2) for i in range(32)]) == 1
    assert bank_ways([(64, 4)] * 32) == 1
    # accumulator pairs (8 bytes: 16 lanes a pass, 4 rows x 8 words): float32 rows of 72
    # (8 words mod 32 apart) fill the banks, rows of 68 (4 apart) overlap
    row8 = [(4 * (72 * (i // 4) + 2 * (i % 4)), 8) for i in range(32)]
    row4 = [(4 * (68 * (i // 4) + 2 * (i % 4)), 8) for i in range(32)]
    assert bank_ways(row8) == 1 and bank_ways(row4) == 2


@pytest.mark.parametrize("w,cfg", CASES, ids=lambda x: str(x.to_dict()) if hasattr(
    x, "to_dict") else f"d{x.head_dim}-L{x.q_len}")
def test_the_kernel_s_shared_accesses_are_conflict_free(w, cfg):
    acc = shared_access_ways(_kernel(w, cfg))
    bad = [a for a in acc if a.ways != 1]
    assert not bad, bad
    tiles = ("S_s", "O_s") if cfg.mma == "wgmma" else ("SO_s",)
    p = "P_s" if cfg.mma == "wgmma" else "QP_s"
    kinds = {(a.buffer, a.kind, a.how != "scalar", a.width) for a in acc}
    # what the test covers: the accumulators stored as 8-byte pairs, the softmax's reads
    # of the scores as pairs, the probabilities written as pairs of 16-bit values
    assert any(b in tiles and k == "store" and intrin and wd == 8 for b, k, intrin, wd in kinds)
    assert any(b in tiles and k == "load" and not intrin and wd == 8 for b, k, intrin, wd in kinds)
    assert (p, "store", False, 4) in kinds


@pytest.mark.parametrize("w,cfg", [(_w(), AttentionConfig(4, 64, 2, "wgmma")), CASES[3]],
                         ids=["wgmma", "mma_sync"])
def test_rows_four_words_apart_conflict(monkeypatch, w, cfg):
    monkeypatch.setattr(knobs, "PAD32", 4)
    monkeypatch.setattr(knobs_wgmma, "PAD32", 4)
    acc = shared_access_ways(_kernel(w, cfg))
    tiles = {"S_s", "O_s", "SO_s"}
    assert max(a.ways for a in acc if a.buffer in tiles) == 2


def _barriers_per_tile(w, cfg) -> int:
    kernel = _kernel(w, cfg)
    # the key loop: one tile an iteration ("kv"), or two or three ("kv2", "kv3": as many
    # as the stages, each tile its own stage)
    loop = next(s for s in walk(kernel.body) if isinstance(s, For)
                and s.var.name in ("kv", "kv2", "kv3"))
    tiles = {"kv": 1, "kv2": 2, "kv3": 3}[loop.var.name]
    total = sum(isinstance(s, Barrier) for s in walk(loop.body))
    assert total % tiles == 0
    return total // tiles


@pytest.mark.parametrize("cfg,n", [
    (AttentionConfig(8, 64, 1, "wgmma"), 3), (AttentionConfig(4, 64, 2, "wgmma"), 2),
    (AttentionConfig(4, 64, 3, "wgmma"), 2), (AttentionConfig(4, 64, 1), 3),
    (AttentionConfig(4, 64, 2), 2)])
def test_barriers_per_key_tile(cfg, n):
    # the scores' store and the softmax, the rescaling and the flush need none (each
    # thread's own elements); one publishes P and the votes; the K/V stages the others
    assert _barriers_per_tile(_w(64, 256), cfg) == n

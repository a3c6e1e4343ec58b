"""Random tensor-core GEMM schedules on the simulator: random block and warp tiles,
k stages, copy widths, padding, fragment loads (ldmatrix or lane by lane), B layouts,
accumulator and output types, float16 and TF32 inputs, cp.async and software pipelining,
all against numpy. Every schedule that builds must be correct (zero mismatches)."""

from __future__ import annotations

import os

import numpy as np

import ptxforge
from ptxforge.ir.dtype import round_to
from ptxforge.ops.schedules.gemm.knobs import TensorCoreConfig
from ptxforge.ops.schedules.gemm.schedule import dense_tensorcore_compute
from ptxforge.passes.errors import PassError
from ptxforge.passes.lower.common import LoweringError
from ptxforge.passes.schedule.common import ScheduleError

from .tensorcore_dense import check_mma_knobs, schedule_dense_tensorcore


def random_case(rng):
    """(M, N, K, config, dtypes) of a valid random schedule: float16 inputs, or (one case
    in four) float32 ones multiplied in TF32 with B as [N, K]."""
    while True:
        tf32 = rng.integers(4) == 0
        wm, wn = int(rng.choice([1, 2])), int(rng.choice([1, 2]))
        bm = wm * int(rng.choice([16, 32]))
        bn = wn * int(rng.choice([8, 16, 32]))
        bk = int(rng.choice([16, 32]))
        cfg = TensorCoreConfig(
            bm, bn, bk, wm, wn, vec=int(rng.choice([1, 2, 4, 8])),
            pad=int(rng.choice([0, 8])), unroll=bool(rng.integers(2)),
            frag_load=str(rng.choice(["ldmatrix", "load"])),
            stages=int(rng.choice([1, 1, 2, 3])), async_copy=bool(rng.integers(2)),
            tf32=bool(tf32))
        M, N, K = (bm * int(rng.integers(1, 3)), bn * int(rng.integers(1, 3)),
                   bk * int(rng.integers(1, 3)))
        acc, out = [("float32", "float32"), ("float32", "float16"),
                    ("float16", "float16")][int(rng.integers(3))]
        layout = str(rng.choice(["nk", "kn"]))
        if tf32:
            acc, out, layout = "float32", "float32", "nk"
        try:
            check_mma_knobs(cfg, M, N, K, 8 if tf32 else 16, 4 if tf32 else 2)
        except ScheduleError:
            continue
        return M, N, K, cfg, acc, out, layout


def check_case(rng):
    M, N, K, cfg, acc, out, layout = random_case(rng)
    ab = "float32" if cfg.tf32 else "float16"
    tensors = dense_tensorcore_compute(M, N, K, ab, out, acc, layout)
    try:
        s = schedule_dense_tensorcore(tensors, cfg)
        mod = ptxforge.build(s, tensors, target="sim")
    except (ScheduleError, LoweringError, PassError) as e:
        # a schedule may be rejected (say, shared memory over the limit), never miscompiled
        assert "exceeded" in str(e) or "limit" in str(e), (cfg, str(e)[:400])
        return False
    a = rng.uniform(-1, 1, (M, K)).astype(ab)
    b = rng.uniform(-1, 1, (N, K) if layout == "nk" else (K, N)).astype(ab)
    c = np.full((M, N), np.nan, out)
    mod(a, b, c)
    if cfg.tf32:  # the products of TF32-rounded inputs, summed in float32
        a, b = round_to(a, "tf32"), round_to(b, "tf32")
    bt = b.astype(np.float64).T if layout == "nk" else b.astype(np.float64)
    want = a.astype(np.float64) @ bt
    err = np.abs(c.astype(np.float64) - want).max() / np.abs(want).max()
    tol = 1e-5 if out == "float32" else 4e-3
    assert err <= tol, (M, N, K, cfg, acc, out, layout, err)
    return True


ROUNDTRIP_CASES = 10
"""Cases built with the print / parse round trip of every pass (the suite's default); the
rest without it, which took about two thirds of the time."""


def test_random_tensorcore_schedules(monkeypatch):
    # 100 in the default run; PTXFORGE_FUZZ_TENSORCORE raises it for soak runs
    count = int(os.environ.get("PTXFORGE_FUZZ_TENSORCORE", "100"))
    rng = np.random.default_rng(2026)
    ran = 0
    while ran < count:
        if ran == ROUNDTRIP_CASES:
            monkeypatch.setenv("PTXFORGE_CHECK_ROUNDTRIP", "0")
        ran += check_case(rng)

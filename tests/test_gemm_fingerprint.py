"""The tensor-core GEMM kernels stay the same kernels: a handful of the workloads of
``bench/gemm_fingerprint.py`` (default schedules on sm_80 and sm_90a, split-K, a wgmma
convolution, an fp8 product, explicit configurations) lower to device IR whose sha256 is
the one saved in ``tests/data/gemm_fingerprint.txt`` from the code before the tensor-core
schedules were rewritten as one template. The whole set (with PTX) runs as::

    PYTHONPATH=<parent of the checkout> python3 bench/gemm_fingerprint.py --check
"""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench",
                     "gemm_fingerprint.py")


def _bench():
    spec = importlib.util.spec_from_file_location("gemm_fingerprint", BENCH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


FP = _bench()
CASES = {c.name: c for c in FP.default_cases() + FP.explicit_cases() if c.name in FP.QUICK}
EXPECTED = FP.read_expected()


def test_the_quick_cases_are_in_the_saved_fingerprint():
    assert set(CASES) == set(FP.QUICK)
    assert set(FP.QUICK) <= set(EXPECTED)


@pytest.mark.parametrize("name", FP.QUICK)
def test_device_ir_is_unchanged(name):
    got = FP.fingerprint(CASES[name], ptx=False)
    assert got == FP._ir_only(EXPECTED[name])

"""Lowering produces, byte for byte, the device IR it produced before it was made faster.

Each case under ``tests/data/lowering_identity`` is a scheduled module as text (the seed
schedule, wgmma and mma.sync GEMMs, a convolution as an implicit GEMM, a softmax) and the
device IR lowering made of it. A change meant only to speed lowering up must keep every
one; a change meant to change kernels regenerates them with
``python3 bench/bench_lowering.py --only NAME --fixtures tests/data/lowering_identity``
(the whole corpus of ``bench/lowering_corpus.py`` is checked with ``--save`` / ``--check``).
"""

from __future__ import annotations

import json
import os

import pytest

from ptxforge import stages
from ptxforge.ir.parser import parse_module
from ptxforge.passes import PassContext
from ptxforge.passes.lower import lowering_pipeline
from ptxforge.target import as_target

DATA = os.path.join(os.path.dirname(__file__), "data", "lowering_identity")
with open(os.path.join(DATA, "targets.json")) as _f:
    TARGETS = json.load(_f)


def _read(name: str) -> str:
    with open(os.path.join(DATA, name)) as f:
        return f.read()


def _first_difference(want: str, got: str) -> str:
    for i, (a, b) in enumerate(zip(want.splitlines(), got.splitlines())):
        if a != b:
            return f"line {i + 1}:\n  expected: {a}\n  got:      {b}"
    return f"{len(want.splitlines())} lines expected, {len(got.splitlines())} got"


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_lowering_gives_the_recorded_device_ir(name):
    module = parse_module(_read(name + ".scheduled.ir"))
    with as_target(TARGETS[name]):
        device = lowering_pipeline()(module, PassContext(verify=False))
    want = _read(name + ".device.ir")
    got = str(device)
    assert got == want, f"{name}: the device IR changed at {_first_difference(want, got)}"


def test_lowering_reports_its_stages():
    module = parse_module(_read("softmax_sm90a.scheduled.ir"))
    with as_target(TARGETS["softmax_sm90a"]), stages.collect() as times:
        lowering_pipeline()(module, PassContext(verify=False))
    passes = {p.name for p in lowering_pipeline()}  # a pass run twice adds up its times
    assert times["lower"] > 0
    assert {"lower." + p for p in passes} <= set(times)
    # the passes run inside the lowering stage: their times add up to at most its time
    assert sum(times["lower." + p] for p in passes) <= times["lower"]

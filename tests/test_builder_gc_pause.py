"""Builds run with the cyclic garbage collector paused, and leave it as they found it."""

from __future__ import annotations

import gc
import threading
from dataclasses import dataclass

import pytest

from ptxforge.ir import te
from ptxforge.ir.to_ir import to_ir
from ptxforge.passes import Pass, PassContext, Pipeline, gc_pause
from ptxforge.passes.lower import lowering_pipeline
from ptxforge.target import as_target


@pytest.fixture(autouse=True)
def _collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_paused_turns_the_collector_off_and_back_on():
    with gc_pause.paused():
        assert not gc.isenabled()
        with gc_pause.paused():  # nested: still off, and still off after the inner block
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_paused_leaves_a_collector_that_was_off_off():
    gc.disable()
    with gc_pause.paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_paused_turns_it_back_on_after_an_error():
    with pytest.raises(ValueError), gc_pause.paused():
        raise ValueError("a failing build")
    assert gc.isenabled()


def test_blocks_of_several_threads_resume_once_the_last_ends():
    inside, release = threading.Event(), threading.Event()

    def build():
        with gc_pause.paused():
            inside.set()
            release.wait(5)

    t = threading.Thread(target=build)
    t.start()
    inside.wait(5)
    with gc_pause.paused():
        pass
    assert not gc.isenabled(), "the other thread's build is still running"
    release.set()
    t.join(5)
    assert gc.isenabled()


@dataclass(frozen=True)
class _SeesCollector(Pass):
    name = "sees_collector"
    seen = []

    def apply(self, module, ctx):
        self.seen.append(gc.isenabled())
        return module


def _module():
    a = te.placeholder((8, 8), name="A")
    b = te.compute((8, 8), lambda i, j: a[i, j] * 2.0, name="B")
    return to_ir([a, b])


def test_pipelines_and_lowering_run_with_the_collector_paused():
    _SeesCollector.seen.clear()
    Pipeline([_SeesCollector()])(_module(), PassContext(verify=False))
    assert _SeesCollector.seen == [False]
    assert gc.isenabled()
    with as_target("cuda -arch=sm_80"):
        device = lowering_pipeline()(_module(), PassContext(verify=False))
    assert device.kernels()
    assert gc.isenabled()

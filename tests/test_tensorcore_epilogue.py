"""The one epilogue check of the tensor-core GEMM template
(:func:`~ptxforge.ops.schedules.gemm.forms.epilogue_refusal`): the schedules, the sketch
rules and the templates ask it before anything is scheduled, so no sketch step finds out
by scheduling and catching an error (an epilogue that read the product elsewhere than at
its own index used to reach the wgmma schedule and fail inside ``tensorize``)."""

from __future__ import annotations

import pytest

from ptxforge import autosched, te
from ptxforge.autosched.tensorcore import tensorcore_sketches
from ptxforge.ops.schedules.gemm.forms import epilogue_refusal
from ptxforge.ops.schedules.gemm.schedule import (
    schedule_gemm_tensorcore,
    schedule_gemm_wgmma,
)
from ptxforge.passes.schedule.common import ScheduleError

SM80 = "cuda -arch=sm_80"
SM90A = "cuda -arch=sm_90a"
N = 128


def _product():
    a = te.placeholder((N, N), "float16", name="A")
    b = te.placeholder((N, N), "float16", name="B")
    k = te.reduce_axis((0, N), name="k")
    c = te.compute((N, N), lambda i, j: te.sum(
        a[i, k].astype("float32") * b[j, k].astype("float32"), axis=k), name="C",
        tag="dense")
    return a, b, c


def _epilogue(kind: str, c):
    """``(extra inputs, output)``: an epilogue of product ``c``."""
    if kind == "bias_cast":
        bias = te.placeholder((N,), "float32", name="bias")
        return [bias], te.compute((N, N), lambda i, j: (c[i, j] + bias[j]).astype("float16"),
                                  name="D")
    if kind == "chain":  # element-wise stages between the product and the output
        e = te.compute((N, N), lambda i, j: c[i, j] * 2.0, name="E")
        return [], te.compute((N, N), lambda i, j: e[i, j] + 1.0, name="D")
    if kind == "transpose":  # stores the product in another layout
        return [], te.compute((N, N), lambda i, j: c[j, i], name="D")
    if kind == "shift":
        return [], te.compute((N, N), lambda i, j: c[i, (j + 1) % N], name="D")
    if kind == "mixed":  # reads the product at its own index and transposed
        e = te.compute((N, N), lambda i, j: c[i, j] * 2.0, name="E")
        return [], te.compute((N, N), lambda i, j: e[i, j] + c[j, i], name="D")
    if kind == "rowsum":
        r = te.reduce_axis((0, N), name="r")
        return [], te.compute((N,), lambda i: te.sum(c[i, r], axis=r), name="D")
    raise ValueError(kind)


TAKEN = ["bias_cast", "chain", "transpose"]
REFUSED = ["shift", "mixed", "rowsum"]


def _task(kind: str, target: str):
    def func():
        a, b, c = _product()
        extra, out = _epilogue(kind, c)
        return [a, b, *extra, out]

    func.__name__ = f"tc_epilogue_{kind}"
    return autosched.SearchTask(func=func, args=(), target=target)


@pytest.mark.parametrize("kind", TAKEN + REFUSED)
def test_epilogue_refusal(kind):
    _, _, c = _product()
    _, out = _epilogue(kind, c)
    why = epilogue_refusal(c.op, out.op)
    assert (why is None) == (kind in TAKEN)
    if why is not None:
        assert f"stage {out.op.name}" in why and "C" in why
    assert epilogue_refusal(c.op, None) is None
    # the implicit-GEMM convolution stores no other layout
    assert (epilogue_refusal(c.op, out.op, remap=False) is None) == (kind in TAKEN[:2])


@pytest.mark.parametrize("kind", TAKEN + REFUSED)
def test_sketch_rules_ask_the_epilogue_check(kind):
    """A task whose epilogue the template takes gets the tensor-core sketches (wgmma's on
    sm_90a too); one it refuses gets none, on either target, without scheduling."""
    want = {SM80: ["tensorcore_gemm(C)"], SM90A: ["tensorcore_gemm(C)", "wgmma_gemm(C)"]}
    for target in (SM80, SM90A):
        names = [s.name for s in tensorcore_sketches(_task(kind, target))]
        assert names == (want[target] if kind in TAKEN else []), (kind, target)


def test_a_transpose_of_the_same_shape_is_a_remapped_step():
    """An output storing the product transposed (same shape) takes tiles that divide the
    product and no split-K, as a reshaped one does."""
    task = _task("transpose", SM90A)
    mma, wg = (sk.steps[0] for sk in tensorcore_sketches(task))
    assert mma.remapped and wg.remapped
    assert all(sl.choices == (1,) for sl in mma.slots() + wg.slots()
               if sl.name.endswith("split_k"))


@pytest.mark.parametrize("schedule", [schedule_gemm_tensorcore, schedule_gemm_wgmma])
def test_the_schedules_name_an_epilogue_they_do_not_fuse(schedule):
    _, _, c = _product()
    _, out = _epilogue("shift", c)
    s = te.create_schedule(out.op)
    with pytest.raises(ScheduleError, match="no element-wise epilogue of C"):
        schedule(s, c.op, out.op, target=SM90A)

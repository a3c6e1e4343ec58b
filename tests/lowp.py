"""Helpers of the tensor-core tests: random inputs in a 16-bit or float32 dtype, their
float64 values, and one run of a built module on the simulator."""

from __future__ import annotations

import numpy as np

import ptxforge
from ptxforge.ir import dtype as dt


def host(rng, shape, dtype):
    """Uniform [-1, 1) values of ``shape`` in ``dtype`` (bfloat16 as its host bits)."""
    x = rng.uniform(-1, 1, shape).astype(np.float32)
    return dt.to_bfloat16(x) if dtype == "bfloat16" else x.astype(dtype)


def f64(x, dtype):
    """``x`` (host values of ``dtype``) as float64."""
    return (dt.from_bfloat16(x) if dtype == "bfloat16" else x).astype(np.float64)


def run_sim(s, args, out, rng):
    """Build ``s`` for the simulator and run it on random ``args`` into a NaN-filled
    ``out``: (module, inputs as float64, output as float64)."""
    mod = ptxforge.build(s, args + [out], target="sim")
    vals = [host(rng, a.shape, a.dtype) for a in args]
    res = (dt.to_bfloat16(np.full(out.shape, np.nan, np.float32)) if out.dtype == "bfloat16"
           else np.full(out.shape, np.nan, out.dtype))
    mod(*vals, res)
    return mod, [f64(v, a.dtype) for v, a in zip(vals, args)], f64(res, out.dtype)


def measure_on_sim(task, states) -> list:
    """The auto-scheduler ``states`` of ``task`` built and measured with the simulator
    runner (checked against the reference, timed by the estimate): the results."""
    from ptxforge import measure
    from ptxforge.autosched.state import state_payload

    inputs = [measure.MeasureInput(task.task_spec, s.pipeline_text(task),
                                   state_payload(task, s)) for s in states]
    return measure.measure_batch(inputs, measure.LocalBuilder(n_parallel=1, compile_to="ir"),
                                 measure.SimRunner(max_sim_seconds=30.0))

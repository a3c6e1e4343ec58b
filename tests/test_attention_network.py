"""Fused attention inside a network: ``graph.build(..., fused_attention=True)`` compiles the
attention of a small transformer block as the one fused kernel, and the network matches the
graph's reference on the simulator; without the option the attention is decomposed."""

from __future__ import annotations

import json
import warnings

import numpy as np

import ptxforge
from ptxforge import graph
from ptxforge.graph import opdefs as G
from ptxforge.graph.build_module import NoTuningRecordWarning
from ptxforge.graph.fused import distinct_functions
from ptxforge.graph.ir import Constant, Var, graph_from_outputs
from ptxforge.graph.opdefs.attention import attention
from ptxforge.graph.opdefs.elemwise import cast_array
from ptxforge.graph.passes.base import GraphPassContext
from ptxforge.ops.testing import widen

RNG = np.random.default_rng(2026)
B, L, HEADS, E = 1, 24, 2, 16
HIDDEN = HEADS * E


def _weight(name: str, dtype: str = "float16") -> Constant:
    w = RNG.standard_normal((HIDDEN, HIDDEN)) / np.sqrt(HIDDEN)
    return Constant(cast_array(w, dtype), name, dtype=dtype)


def _block(causal: bool, dtype: str = "float16"):
    """x [B, L, HIDDEN] -> projections, heads, attention, heads merged, projection."""
    x = Var("x", (B, L, HIDDEN), dtype)
    flat = G.reshape(x, (B * L, HIDDEN))

    def heads(name):
        y = G.reshape(G.dense(flat, _weight(name, dtype)), (B, L, HEADS, E))
        return G.transpose(y, (0, 2, 1, 3))

    att = attention(heads("wq"), heads("wk"), heads("wv"), is_causal=causal)
    merged = G.reshape(G.transpose(att, (0, 2, 1, 3)), (B * L, HIDDEN))
    return graph_from_outputs(G.dense(merged, _weight("wo", dtype))), x


def _run(lib, feeds) -> np.ndarray:
    m = graph.GraphModule(lib, ptxforge.sim())
    m.set_input(**feeds)
    m.run()
    return m.get_output(0).numpy()


def _attention_functions(lib) -> list:
    return [f for f in lib.functions.values() if f.pipeline_text.startswith("fused_attention")]


def test_network_runs_the_fused_kernel_and_matches_the_reference():
    net, x = _block(causal=True)
    feeds = {"x": cast_array(RNG.standard_normal(x.shape), "float16")}
    want = widen(graph.evaluate(net, feeds), "float16")
    lib = graph.build(net, "sim -arch=sm_80", fused_attention=True)
    fused = _attention_functions(lib)
    assert len(fused) == 1, lib.summary()
    kernels = list(fused[0].device_module.kernels())
    assert len(kernels) == 1 and "attention" in kernels[0].name
    got = widen(_run(lib, feeds), "float16")
    assert np.abs(got - want).max() <= 2e-2 * max(1.0, np.abs(want).max())


def test_a_float32_network_built_in_float16_runs_the_fused_kernel():
    # the attention of a float32 network (an import) is judged in the build's precision:
    # it stays whole, to_mixed_precision casts it down, and the kernel runs it
    net, x = _block(causal=False, dtype="float32")
    feeds = {"x": RNG.standard_normal(x.shape).astype(np.float32)}
    want = graph.evaluate(net, feeds)
    lib = graph.build(net, "sim -arch=sm_80", precision="float16", fused_attention=True)
    assert len(_attention_functions(lib)) == 1, lib.summary()
    got = _run(lib, feeds)
    assert got.dtype == np.float32
    assert np.abs(got - want).max() <= 2e-2 * max(1.0, np.abs(want).max())
    # in float32 the kernel cannot run it: the attention is decomposed as before
    lib32 = graph.build(net, "sim -arch=sm_80", fused_attention=True)
    assert not _attention_functions(lib32)


def test_off_by_default_and_the_pass_config_turns_it_on():
    net, _ = _block(False)
    off = [f.name for f in distinct_functions(graph.optimize(net))[0]]
    on = [f.name for f in distinct_functions(graph.optimize(net, fused_attention=True))[0]]
    with GraphPassContext(config={"fused_attention": True}) as ctx:
        by_ctx = [f.name for f in distinct_functions(graph.optimize(net, ctx=ctx))[0]]
    assert not any("attention" in n for n in off), off
    assert sum("attention" in n for n in on) == 1, on
    assert by_ctx == on
    # the option is for one run: the context it used is left as it was
    assert "fused_attention" not in GraphPassContext.current().config


def test_ptx_for_the_fused_function():
    from ptxforge.graph.build_module import compile_function

    net, _ = _block(True)
    funcs, _ = distinct_functions(graph.optimize(net, fused_attention=True))
    (func,) = [f for f in funcs if "attention" in f.name]
    f = compile_function(func, "cuda -arch=sm_80", None)
    assert f.pipeline_text.startswith("fused_attention") and not f.tuned
    ptx = f.ptx.get_source("ptx")
    assert "mma.sync" in ptx and "cp.async" in ptx and "ldmatrix" in ptx


def test_an_auto_scheduler_record_picks_the_configuration(tmp_path):
    """The network's attention task, searched over the fused sketch only, gives a record
    whose ``fused_attention`` step ``graph.build`` uses under ``ApplyHistoryBest``."""
    from ptxforge import autosched, measure

    net, x = _block(True)
    with GraphPassContext(config={"fused_attention": True}):
        tasks, _ = autosched.extract_tasks(net, target="cuda -arch=sm_80")
    (task,) = [t for t in tasks if any(s.name.startswith("fused_attention(")
                                       for s in t.sketches)]
    k = next(i for i, s in enumerate(task.sketches) if s.name.startswith("fused_attention("))
    task.__dict__["sketches"], task.__dict__["models"] = [task.sketches[k]], [task.models[k]]
    log = str(tmp_path / "att.json")
    builder = measure.LocalBuilder(n_parallel=0, compile_to="ir")
    runner = measure.SimRunner(check_correctness=False, target="cuda -arch=sm_80")
    opts = autosched.TuningOptions(num_measure_trials=1, num_measures_per_round=1,
                                   builder=builder, runner=runner, verbose=0,
                                   measure_callbacks=[autosched.RecordToFile(log)])
    pol = autosched.SketchPolicy(task, autosched.RandomModel(seed=2), seed=2, verbose=0)
    task.tune(opts, search_policy=pol)
    with open(log) as f:
        (step_text,) = [json.loads(line)["pipeline"] for line in f]
    assert step_text.startswith("fused_attention(")
    feeds = {"x": cast_array(RNG.standard_normal(x.shape), "float16")}
    with autosched.ApplyHistoryBest(log), warnings.catch_warnings():
        warnings.simplefilter("ignore", NoTuningRecordWarning)  # the other functions
        lib = graph.build(net, "sim -arch=sm_80", fused_attention=True)
    (f,) = _attention_functions(lib)
    assert f.tuned and f.pipeline_text == step_text
    want = widen(graph.evaluate(net, feeds), "float16")
    got = widen(_run(lib, feeds), "float16")
    assert np.abs(got - want).max() <= 2e-2 * max(1.0, np.abs(want).max())


def test_auto_fuses_long_attention_only():
    # the default ("auto"): the fused kernel from AUTO_MIN_KEYS keys, the products below;
    # an explicit choice wins either way
    from ptxforge.graph.opdefs.attention import AUTO_MIN_KEYS

    def attention_calls(seq: int, **kw) -> int:
        q = Var("q", (1, 2, seq, 16), "float16")
        net = graph_from_outputs(attention(q, q, q))
        funcs = distinct_functions(graph.optimize(net, **kw))[0]
        return sum("attention" in f.name for f in funcs)

    assert attention_calls(AUTO_MIN_KEYS) == 1
    assert attention_calls(AUTO_MIN_KEYS - 16) == 0
    assert attention_calls(AUTO_MIN_KEYS, fused_attention=False) == 0
    assert attention_calls(AUTO_MIN_KEYS - 16, fused_attention=True) == 1
    with GraphPassContext(config={"fused_attention": False}) as ctx:
        assert attention_calls(AUTO_MIN_KEYS, ctx=ctx) == 0

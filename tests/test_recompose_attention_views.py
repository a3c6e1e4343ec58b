"""An attention whose q, k and v are read through ``views`` (the slices of a combined
projection ``fold_attention_layout`` folds into it): ``decompose_attention`` writes the
slices back, and the AutoTVM template ``attention.cuda`` takes the layout and the views, so
a record tuned for the attention of a graph build is the record that build looks up."""

from __future__ import annotations

import warnings

import numpy as np

from ptxforge import autotvm, graph
from ptxforge.autotvm import attention as template
from ptxforge.autotvm.dispatch import DEFAULT_TARGET, DispatchContext
from ptxforge.graph.passes import DecomposeAttention, GraphPassContext
from ptxforge.graph.passes.fold_attention_layout import fold_attention_layout
from ptxforge.measure import load_records
from ptxforge.ops.attention import attention_workload
from ptxforge.ops.schedules.attention import choose_attention_config
from ptxforge.ops.testing import widen
from ptxforge.target import as_target

from .test_fold_attention_layout_views import _attention_call, _layer, _run

RNG = np.random.default_rng(11)


def _feeds(x, keep) -> dict:
    keep_arr = np.ones(keep.shape, bool)
    keep_arr[1, ..., 25:] = False
    return {"x": RNG.standard_normal(x.shape).astype(np.float16), "keep": keep_arr}


def test_decompose_attention_reads_the_views_as_slices():
    net, x, keep = _layer()
    with GraphPassContext(config={"fused_attention": True}):
        folded = fold_attention_layout(graph.optimize(net, fuse=False))
    assert _attention_call(folded).attrs.get("views")
    with GraphPassContext(config={"fused_attention": False}):
        flat = DecomposeAttention()(folded)
    ops = [n.op for n in flat.calls()]
    assert "nn.attention" not in ops and ops.count("strided_slice") == 3
    feeds = _feeds(x, keep)
    want = widen(graph.evaluate(folded, feeds), "float16")
    got = widen(graph.evaluate(flat, feeds), "float16")
    assert np.isfinite(got).all()
    assert np.abs(got - want).max() <= 2e-2 * max(1.0, np.abs(want).max())


def _attention_function(lib):
    for f in lib.functions.values():
        out = f.func.build_tensors()[-1]
        if getattr(out.op, "tag", "") == "attention":
            return f, attention_workload(out)
    names = [f.func.name for f in lib.functions.values()]
    raise AssertionError(f"no fused attention among {names}")


def test_template_args_carry_layout_and_views():
    net, _, _ = _layer()
    lib = graph.build(net, "sim -arch=sm_80", fused_attention=True)
    _, w = _attention_function(lib)
    assert w.layout == "bshd" and w.views is not None
    args = template.template_args(w)
    assert args[-2] == "bshd" and len(args[-1]) == 3 and all(args[-1])
    _, back = template.attention_declaration(*args)
    assert back == w  # the template declares the graph's own problem
    plain = template.template_args(type(w)(*[getattr(w, f) for f in (
        "batch", "heads", "kv_heads", "q_len", "kv_len", "head_dim", "v_dim", "dtype",
        "causal", "scale", "mask")]))
    assert plain != args and len(plain) == 12  # records of the plain problem keep their key


def test_a_tuned_record_of_a_viewed_attention_is_found_by_the_graph_build(tmp_path):
    net, x, keep = _layer()
    target = "sim -arch=sm_80"
    lib = graph.build(net, target, fused_attention=True)
    _, w = _attention_function(lib)
    log = str(tmp_path / "attention.json")
    with GraphPassContext(config={"fused_attention": True}):
        (task,) = template.extract_tasks(net)
    assert task.args == template.template_args(w)
    option = autotvm.measure_option(
        builder=template.AttentionBuilder(n_parallel=0, compile_to="ir"),
        runner=autotvm.SimRunner(max_sim_seconds=10.0))
    tuner = autotvm.tuner.GridSearchTuner(task)
    tuner.tune(n_trial=len(task.config_space), measure_option=option,
               callbacks=[autotvm.callback.log_to_file(log)])
    records = load_records(log)
    ok = [(inp, r) for inp, r in records if r.error_no == 0]
    assert ok and all(r.correctness == "passed" for _, r in ok)
    best_inp, _ = min(ok, key=lambda ir: ir[1].mean)
    knobs = {k: v for k, _, v in best_inp.payload["autotvm"]["config"]["entity"]}
    # a record that is not the default: the build must take the log's, not the chooser's
    default = choose_attention_config(w, as_target("cuda -arch=sm_80")).to_dict()
    other = next((inp for inp, _ in ok if {k: v for k, _, v in inp.payload["autotvm"][
        "config"]["entity"]} != default), best_inp)
    pick = str(tmp_path / "pick.json")
    with open(log) as src, open(pick, "w") as dst:
        for line in src:
            if f'"index":{other.payload["autotvm"]["config"]["index"]},' in line:
                dst.write(line)
    knobs = {k: v for k, _, v in other.payload["autotvm"]["config"]["entity"]}
    with autotvm.apply_history_best(pick):
        workload = (template.NAME,) + template.template_args(w)
        assert DispatchContext.current().query_all(DEFAULT_TARGET, workload)
        with as_target("cuda -arch=sm_80"), warnings.catch_warnings():
            warnings.simplefilter("error")  # the record is found: no fallback warning
            assert template.dispatched_config(w).to_dict() == knobs
        tuned = graph.build(net, target, fused_attention=True)
    f, _ = _attention_function(tuned)
    (kernel,) = f.device_module.kernels()
    threads = kernel.launch.block[0] * kernel.launch.block[1] * kernel.launch.block[2]
    assert threads == 32 * knobs["warps"]
    feeds = _feeds(x, keep)
    got, ref = widen(_run(tuned, feeds), "float16"), widen(_run(lib, feeds), "float16")
    assert np.abs(got - ref).max() <= 2e-2 * max(1.0, np.abs(ref).max())

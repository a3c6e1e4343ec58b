"""The fused attention's AutoTVM template (``attention.cuda``) and its builder: the space,
rejected knobs, a short tuning on the simulator runner with correctness checks, and the
best record dispatched back into the template."""

from __future__ import annotations

import warnings

import pytest

from ptxforge import autotvm
from ptxforge.autotvm import attention as template  # noqa: F401  (registers it)
from ptxforge.autotvm.attention import AttentionBuilder
from ptxforge.autotvm.space import InstantiationError
from ptxforge.autotvm.tuner import GridSearchTuner
from ptxforge.measure import load_records
from ptxforge.ops.schedules.attention import (
    AttentionError,
    AttentionMask,
    AttentionWorkload,
    choose_attention_config,
)
from ptxforge.ops.schedules.attention.schedule_pass import FusedAttention
from ptxforge.target import as_target

ARGS = (1, 2, 1, 9, 24, 16, 16, "float16", True, None)


def test_space_defaults_and_rejected_knobs():
    task = autotvm.task.create(template.NAME, args=ARGS, target="cuda")
    space = task.config_space
    configs = [space.get(i) for i in range(len(space))]
    values = {k: sorted({c[k].val for c in configs}) for k in ("warps", "block_kv", "stages")}
    # 9 rows need no more than 1 warp of 16; 24 keys no tile wider than 32
    assert values == {"warps": [1], "block_kv": [16, 32], "stages": [1, 2]}
    assert len(space) == 4
    w = AttentionWorkload(1, 2, 1, 9, 24, 16, 16, "float16", True)
    best = choose_attention_config(w, as_target("cuda"))
    sch, _ = task.instantiate(task.default_config())
    step = [p for p in sch.pipeline if isinstance(p, FusedAttention)][0]
    assert (step.warps, step.block_kv, step.stages, step.causal) == (
        best.warps, best.block_kv, best.stages, True)
    big = autotvm.task.create(template.NAME, args=(1, 16, 16, 2048, 2048, 128, 128,
                                                   "float16"), target="cuda")
    bad = next(c for c in (big.config_space.get(i) for i in range(len(big.config_space)))
               if c["warps"].val == 8 and c["block_kv"].val == 128 and c["stages"].val == 2)
    with pytest.raises(InstantiationError, match="shared memory"):
        big.instantiate(bad)


def test_tuning_on_the_simulator_and_dispatch(tmp_path):
    log = str(tmp_path / "attention.json")
    task = autotvm.task.create(template.NAME, args=ARGS, target="cuda")
    option = autotvm.measure_option(builder=AttentionBuilder(n_parallel=0, compile_to="ir"),
                                    runner=autotvm.SimRunner(max_sim_seconds=5.0))
    tuner = GridSearchTuner(task)
    tuner.tune(n_trial=2, measure_option=option,
               callbacks=[autotvm.callback.log_to_file(log)])
    records = load_records(log)
    assert len(records) == 2
    assert all(r.error_no == 0 and r.correctness == "passed" for _, r in records)
    with autotvm.apply_history_best(log):
        sch, tensors = template.attention_template(*ARGS)
    assert any(isinstance(p, FusedAttention) for p in sch.pipeline)
    # the best record is what the graph's fused function gets (dispatched_config)
    ok = [(inp, r) for inp, r in records if r.error_no == 0]
    best_inp, _ = min(ok, key=lambda ir: ir[1].mean)
    knobs = {k: v for k, _, v in best_inp.payload["autotvm"]["config"]["entity"]}
    w = AttentionWorkload(*ARGS)
    assert template.template_args(w) == ARGS
    with autotvm.apply_history_best(log), as_target("cuda"), warnings.catch_warnings():
        warnings.simplefilter("error")  # found the record: no fallback warning
        got = template.dispatched_config(w)
    assert got.to_dict() == knobs
    with as_target("cuda"), warnings.catch_warnings():
        warnings.simplefilter("error")
        fallback = template.dispatched_config(w)
    assert fallback == choose_attention_config(w, as_target("cuda"))


def test_masked_candidates_build_and_check_on_the_simulator():
    # a mask among the parameters: the builder's host takes them in the task's order and
    # the kernel in its own; the runner's correctness check compares with the reference
    w = AttentionWorkload(1, 2, 1, 9, 20, 16, 16, "bfloat16", False, None,
                          AttentionMask((1, 1, 1, 20), "bool"))
    args = template.template_args(w)
    task = autotvm.task.create(template.NAME, args=args, target="cuda")
    builder = AttentionBuilder(n_parallel=0, compile_to="ir")
    runner = autotvm.SimRunner(max_sim_seconds=5.0)
    inp = task.measure_input(task.default_config()).to_measure()
    (built,) = builder.build([inp])
    assert built.error_no == 0, built.error_msg
    names = [p.name for p in built.artifact.device_module().host.params]
    assert sorted(names) == ["T_attention_out", "k", "mask", "q", "v"]
    (result,) = runner.run([inp], [built])
    assert result.error_no == 0 and result.correctness == "passed", result


def test_auto_scheduler_sketch_ranks_and_builds_its_states():
    import numpy as np

    from ptxforge import autosched, backend_sim, te
    from ptxforge.autosched.attention import AttentionStep, attention_model, attention_sketches
    from ptxforge.autotvm.attention import build_attention_candidate
    from ptxforge.ir.compute_dag import ComputeDAG
    from ptxforge.measure import BuildOptions, MeasureInput
    from ptxforge.ops.attention import attention
    from ptxforge.ops.attention_testing import attention_python

    q = te.placeholder((1, 2, 40, 16), "float16", name="q")
    k = te.placeholder((1, 1, 40, 16), "float16", name="k")
    v = te.placeholder((1, 1, 40, 16), "float16", name="v")
    out = attention(q, k, v, causal=True)
    task = autosched.SearchTask(compute_dag=ComputeDAG([q, k, v, out]),
                                target="cuda")
    (sk,) = attention_sketches(task)
    (step,) = sk.steps
    assert isinstance(step, AttentionStep) and len(step.configs) > 4
    rows = np.arange(len(step.configs))[:, None]
    model = attention_model(step, sk.values(rows), task.hardware_params, len(rows))
    assert model["valid"].all() and np.isfinite(model["est"]).all()
    best = int(np.argmin(model["est"]))
    inp = MeasureInput(task.task_spec, sk.pipeline_text((best,)))
    assert "fused_attention(" in inp.pipeline_text and "causal=True" in inp.pipeline_text
    res = build_attention_candidate(inp, BuildOptions(compile_to="ir"))
    assert res.error_no == 0, res.error_msg
    rng = np.random.default_rng(3)
    args = [rng.standard_normal(tuple(t.shape)).astype(np.float16) for t in (q, k, v)]
    o = np.full((1, 2, 40, 16), np.nan, np.float16)
    backend_sim.run(res.artifact.device_module(), [*args, o])
    want = attention_python(*args, causal=True)
    assert np.abs(o.astype(np.float64) - want).max() < 4e-3


def test_a_refused_step_raises_a_pass_error_naming_the_rule():
    # the step's own checks raise the pass error of the pass framework (pass, original)
    from ptxforge.passes.errors import PassError

    task = autotvm.task.create(template.NAME, args=ARGS, target="cuda")
    sch, _ = task.instantiate(task.default_config())
    step = [p for p in sch.pipeline if isinstance(p, FusedAttention)][0]
    bad = FusedAttention(warps=3, block_kv=step.block_kv, stages=step.stages,
                         causal=step.causal)
    with pytest.raises(PassError, match="warps must be one of") as info:
        bad.apply(None, None)
    assert isinstance(info.value.original, AttentionError)
    assert info.value.pass_ is bad


def test_a_function_whose_mask_comes_first_gets_its_roles_from_the_stages():
    # a network's fused function orders its parameters as the graph gives them (HF BERT's
    # bool mask first): the kernel still takes q, k, v, mask from the attention's stages
    import numpy as np
    from ptxforge import backend_sim, ops, te
    from ptxforge.graph.opdefs.elemwise import cast_array
    from ptxforge.ir.to_ir import to_ir
    from ptxforge.ops.attention_testing import attention_python, attention_tolerance
    from ptxforge.ops.schedules.attention.schedule_pass import fused_attention_device_module
    from ptxforge.ops.testing import widen

    rng = np.random.default_rng(5)
    m = te.placeholder((1, 1, 24, 24), "bool", name="p0")
    v = te.placeholder((1, 2, 24, 32), "float16", name="p1")
    q = te.placeholder((1, 2, 24, 16), "float16", name="p2")
    k = te.placeholder((1, 2, 24, 16), "float16", name="p3")
    out = ops.attention(q, k, v, m)
    module = to_ir([m, v, q, k, out])
    step = FusedAttention(warps=1, block_kv=16, stages=2)
    device = fused_attention_device_module(module, step, "sim -arch=sm_80")
    mask = rng.random((1, 1, 24, 24)) < 0.7
    mask[..., 0] = True
    vals = {n: cast_array(rng.standard_normal(t.shape), "float16")
            for n, t in (("v", v), ("q", q), ("k", k))}
    res = cast_array(np.zeros((1, 2, 24, 32)), "float16")
    backend_sim.run(device, [mask, vals["v"], vals["q"], vals["k"], res])
    want = attention_python(vals["q"], vals["k"], vals["v"], mask, None, False,
                            dtype="float16")
    err = np.abs(widen(res, "float16") - want).max() / max(1.0, np.abs(want).max())
    assert err <= attention_tolerance("float16"), err

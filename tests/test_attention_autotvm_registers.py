"""The AutoTVM template's ``scores`` and ``p_operand`` knobs (sm_90a): defined last so the
config indices and records of the space before them keep their meaning (an old record
loads and applies the same configuration), illegal combinations refused with the rule,
the register forms instantiated by the template and checked against numpy on the
simulator, and a short grid search on the simulator runner measuring them."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ptxforge import autotvm, backend_sim
from ptxforge.autotvm import attention as template
from ptxforge.autotvm.space import InstantiationError
from ptxforge.autotvm.tuner import GridSearchTuner
from ptxforge.measure import BuildOptions, build_candidate, load_records
from ptxforge.ops.attention_testing import attention_python, attention_tolerance
from ptxforge.ops.schedules.attention import (
    AttentionConfig,
    AttentionWorkload,
    choose_attention_config,
)
from ptxforge.ops.schedules.attention.schedule_pass import fused_attention_step
from ptxforge.ops.testing import widen
from ptxforge.target import as_target

H100 = as_target("cuda -arch=sm_90a")
# 50 query rows (one warpgroup's 64, padded), 70 keys (two tiles of 64, the last padded)
ARGS = (1, 2, 1, 50, 70, 64, 64, "float16", True, None)
OLD_KNOBS = ("warps", "block_kv", "stages", "mma")
# each defined last when it came, its old behaviour first
NEW_KNOBS = ("scores", "p_operand", "overlap", "schedule")


def _task(args=ARGS):
    with H100:
        return autotvm.task.create(template.NAME, args=args, target=H100)


def _entity(space, **want):
    """The first config of ``space`` holding the knob values ``want``."""
    return next(c for c in (space.get(i) for i in range(len(space)))
                if all(c[k].val == v for k, v in want.items()))


def _step(task, config):
    with H100:
        sch, _ = task.instantiate(config)
    return fused_attention_step(sch.pipeline)


def test_the_knobs_come_last_and_keep_the_old_indices():
    space = _task().config_space
    assert list(space.space_map) == [*OLD_KNOBS, *NEW_KNOBS]
    assert [s.entities[0].val for s in list(space.space_map.values())[4:]] == [
        "shared", "shared", "none", "cooperative"]
    old_dims = space.dims[:4]
    old_len = int(np.prod(old_dims))
    assert len(space) == old_len * 16
    for index in range(old_len):
        # the index in the space without the two knobs: the first knob varies fastest
        t, old = index, {}
        for name, d in zip(OLD_KNOBS, old_dims):
            old[name] = space.space_map[name].entities[t % d].val
            t //= d
        c = space.get(index)
        assert {k: c[k].val for k in OLD_KNOBS} == old
        assert [c[k].val for k in NEW_KNOBS] == ["shared", "shared", "none", "cooperative"]
    # sm_80 has no wgmma: no mma knob, no register knobs
    plain = autotvm.task.create(template.NAME, args=ARGS, target="cuda").config_space
    assert list(plain.space_map) == ["warps", "block_kv", "stages"]


@pytest.mark.parametrize("knobs, rule", [
    ({"mma": "wgmma", "scores": "shared", "p_operand": "registers"},
     "needs the scores in registers"),
    ({"mma": "mma_sync", "scores": "registers", "p_operand": "shared"},
     "form of the wgmma kernel"),
    ({"mma": "mma_sync", "scores": "registers", "p_operand": "registers"},
     "form of the wgmma kernel"),
    ({"mma": "wgmma", "scores": "registers", "stages": 3}, "stages"),
])
def test_illegal_combinations_are_refused_with_the_rule(knobs, rule):
    task = _task()
    config = _entity(task.config_space, warps=4, block_kv=64, **knobs)
    with pytest.raises(InstantiationError, match=rule):
        _step(task, config)


@pytest.mark.parametrize("p_operand", ["shared", "registers"])
def test_the_template_builds_the_register_forms_and_they_match_numpy(p_operand):
    task = _task()
    config = _entity(task.config_space, warps=4, block_kv=64, stages=2, mma="wgmma",
                     scores="registers", p_operand=p_operand)
    step = _step(task, config)
    assert step.config == AttentionConfig(4, 64, 2, "wgmma", "registers", p_operand)
    with H100:
        inp = task.measure_input(config)
    assert 'scores="registers"' in inp.pipeline_text
    res = build_candidate(inp.to_measure(), BuildOptions(compile_to="ir"))
    assert res.error_no == 0, res.error_msg
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal(s).astype(np.float16)
               for s in ((1, 2, 50, 64), (1, 1, 70, 64), (1, 1, 70, 64)))
    out = np.full((1, 2, 50, 64), np.nan, np.float16)
    backend_sim.run(res.artifact.device_module(), [q, k, v, out])
    want = attention_python(q, k, v, None, None, True, dtype="float16")
    err = np.abs(widen(out, "float16") - want).max() / max(1.0, np.abs(want).max())
    assert err <= attention_tolerance("float16"), err


def test_an_old_record_applies_the_same_configuration(tmp_path):
    # a record written before the register knobs: its entity list lacks them
    task = _task()
    space = task.config_space
    config = _entity(space, warps=4, block_kv=64, stages=3, mma="wgmma")
    old_len = int(np.prod(space.dims[:4]))
    assert config.index < old_len
    log = tmp_path / "new.json"
    option = autotvm.measure_option(
        builder=autotvm.LocalBuilder(n_parallel=0, compile_to="ir"),
        runner=autotvm.SimRunner(max_sim_seconds=10.0))
    GridSearchTuner(task, range_idx=(config.index, config.index)).tune(
        n_trial=1, measure_option=option, callbacks=[autotvm.callback.log_to_file(str(log))])
    row = json.loads(log.read_text().splitlines()[0])
    entity = row["payload"]["autotvm"]["config"]["entity"]
    assert [e[0] for e in entity] == [*OLD_KNOBS, *NEW_KNOBS]
    row["payload"]["autotvm"]["config"]["entity"] = entity[:4]
    old = tmp_path / "old.json"
    old.write_text(json.dumps(row) + "\n")
    ((inp, res),) = load_records(str(old))
    assert res.error_no == 0 and res.correctness == "passed"
    assert [k for k, _, _ in inp.payload["autotvm"]["config"]["entity"]] == list(OLD_KNOBS)
    # its index names the same configuration in the space with the new knobs
    again = space.get(row["payload"]["autotvm"]["config"]["index"])
    assert again.get_other_option() == {**config.get_other_option()}
    w = AttentionWorkload(*ARGS)
    with autotvm.apply_history_best(str(old)), H100:
        got = template.dispatched_config(w)
    assert got == AttentionConfig(4, 64, 3, "wgmma", "shared", "shared")


def test_grid_search_on_the_simulator_measures_the_register_forms(tmp_path):
    task = _task()
    space = task.config_space
    first = _entity(space, mma="wgmma", scores="registers").index
    log = str(tmp_path / "tune.json")
    option = autotvm.measure_option(
        builder=autotvm.LocalBuilder(n_parallel=0, compile_to="ir"),
        runner=autotvm.SimRunner(max_sim_seconds=10.0))
    GridSearchTuner(task, range_idx=(first, len(space) - 1)).tune(
        n_trial=len(space) - first, measure_option=option,
        callbacks=[autotvm.callback.log_to_file(log)])
    measured = set()
    for inp, res in load_records(log):
        knobs = {k: v for k, _, v in inp.payload["autotvm"]["config"]["entity"]}
        if res.error_no == 0:
            assert res.correctness == "passed", res
            measured.add((knobs["scores"], knobs["p_operand"], knobs["stages"]))
    assert measured == {("registers", p, st) for p in ("shared", "registers") for st in (1, 2)}
    with autotvm.apply_history_best(log), H100:
        got = template.dispatched_config(AttentionWorkload(*ARGS))
    assert (got.mma, got.scores) == ("wgmma", "registers")


@pytest.mark.parametrize("keys", [70, 1024])
def test_the_default_config_is_the_choosers_in_the_space(keys):
    # the defaults name every knob (the shared values too), so the tuner's default config
    # is a point of the space (beyond 512 keys a register form)
    args = (1, 2, 1, 64, keys, 64, 64, "float16", False)
    task = _task(args)
    with H100:
        default = task.default_config()
        assert default is not None
        step = _step(task, default)
    assert step.config == choose_attention_config(AttentionWorkload(*args), H100)
    if keys > 512:
        assert (step.config.mma, step.config.scores) == ("wgmma", "registers")


def test_the_overlapped_and_ping_pong_forms_are_knobs_after_the_old_ones():
    task = _task()
    space = task.config_space
    want = dict(warps=4, block_kv=64, stages=2, mma="wgmma", scores="registers",
                p_operand="registers")
    overlapped = _entity(space, **want, overlap="intra", schedule="cooperative")
    step = _step(task, overlapped)
    assert (step.overlap, step.schedule) == ("intra", "cooperative")
    assert template._config_of(overlapped, True) == AttentionConfig(
        4, 64, 2, "wgmma", "registers", "registers", "intra", "cooperative")
    # the space before the two knobs is the first block of indices: there both are the
    # old behaviour, so an index written then names the same kernel now
    plain = _entity(space, **want, overlap="none", schedule="cooperative")
    assert plain.index < int(np.prod(space.dims[:6])) <= overlapped.index
    assert (_step(task, plain).overlap, _step(task, plain).schedule) == ("none",
                                                                        "cooperative")

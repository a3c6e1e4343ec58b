"""AutoTVM records written before knobs were appended to a space still count: a resumed
tuner takes a sm_90a attention record without the ``scores`` and ``p_operand`` knobs as the
config it denotes (those knobs at their first candidate, "shared") and never measures it
again; and ``Task.default_config()`` gives the defaults of the task's target, not of the
machine it runs on."""

from __future__ import annotations

import json

import pytest
from ptxforge import autotvm
from ptxforge.autotvm import attention as template
from ptxforge.autotvm.config_match import config_in_space
from ptxforge.autotvm.record import load_from_file
from ptxforge.autotvm.space import ConfigEntity, OtherOptionEntity
from ptxforge.autotvm.tuner import GridSearchTuner
from ptxforge.measure import load_records
from ptxforge.target import Target, as_target

from .test_autotvm_resume import _option

H100 = as_target("cuda -arch=sm_90a")
# 50 query rows, 70 keys, head dim 64, causal (as tests/test_attention_autotvm_registers.py)
ARGS = (1, 2, 1, 50, 70, 64, 64, "float16", True, None)
OLD_KNOBS = ("warps", "block_kv", "stages", "mma")


def _task():
    return autotvm.task.create(template.NAME, args=ARGS, target=H100)


def _old_log(tmp_path, task, indices) -> str:
    """A log of ``indices`` as written before the register knobs: entities without them."""
    new = tmp_path / "new.json"
    for index in indices:
        GridSearchTuner(task, range_idx=(index, index)).tune(
            n_trial=1, measure_option=_option(),
            callbacks=[autotvm.callback.log_to_file(str(new))])
    rows = [json.loads(line) for line in new.read_text().splitlines()]
    for row in rows:
        entity = row["payload"]["autotvm"]["config"]["entity"]
        assert [e[0] for e in entity] == [*OLD_KNOBS, "scores", "p_operand", "overlap",
                                          "schedule"]
        row["payload"]["autotvm"]["config"]["entity"] = entity[:len(OLD_KNOBS)]
    old = tmp_path / "old.json"
    old.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(old)


def test_a_resumed_tuner_counts_records_written_before_the_new_knobs(tmp_path):
    task = _task()
    space = task.config_space
    indices = [0, 5, 17]
    log = _old_log(tmp_path, task, indices)
    old = list(load_from_file(log))
    assert all(len(list(inp.config)) == len(OLD_KNOBS) for inp, _ in old)
    tuner = GridSearchTuner(task, range_idx=(0, 23))
    tuner.load_history(old)
    assert set(indices) <= tuner.visited
    best_index = tuner.best_config.index
    assert best_index in indices and tuner.best_config == space.get(best_index)
    assert (tuner.best_config["scores"].val, tuner.best_config["p_operand"].val) == (
        "shared", "shared")
    # the resumed grid search measures the rest of its range, none of the old configs
    tuner.tune(n_trial=24, measure_option=_option(),
               callbacks=[autotvm.callback.log_to_file(str(tmp_path / "more.json"))])
    measured = [inp.payload["autotvm"]["config"]["index"]
                for inp, _ in load_records(tmp_path / "more.json")]
    assert not set(measured) & set(indices) and len(measured) == 24 - len(indices)


def test_which_recorded_configs_denote_a_config_of_the_space():
    space = _task().config_space
    c = space.get(5)
    assert config_in_space(space, c) == c  # a record of the space as it is
    short = ConfigEntity(5, None, {k: c[k] for k in OLD_KNOBS})
    assert config_in_space(space, short) == c
    # its index does not matter once the knobs are a prefix: the values decide
    assert config_in_space(space, ConfigEntity(10**9, None, {k: c[k] for k in OLD_KNOBS})) == c
    # a value the knob no longer offers, knobs out of order, a full list that disagrees
    bad = dict({k: c[k] for k in OLD_KNOBS}, warps=OtherOptionEntity(999))
    assert config_in_space(space, ConfigEntity(5, None, bad)) is None
    swapped = {k: c[k] for k in ("block_kv", "warps", "stages", "mma")}
    assert config_in_space(space, ConfigEntity(5, None, swapped)) is None
    other = space.get(6)
    assert config_in_space(space, ConfigEntity(5, None, {k: other[k] for k in other})) is None


def test_default_config_takes_the_defaults_of_the_tasks_target():
    task = _task()
    assert Target.current() is None
    cfg = task.default_config()
    assert cfg is not None
    with H100:
        want = template._defaults(*ARGS)
    assert {k: cfg[k].val for k in cfg} == {k: getattr(v, "val", v) for k, v in want.items()}
    assert cfg["mma"].val == "wgmma"  # sm_90a's own kernel, whatever GPU this machine has


@pytest.mark.parametrize("target", ["cuda -arch=sm_80", "cuda -arch=sm_90a"])
def test_default_config_of_a_tensor_core_dense_follows_its_target(target):
    from ptxforge.autotvm import tensorcore_dense

    task = autotvm.task.create(tensorcore_dense.NAME, args=(256, 256, 256),
                               target=target)
    cfg = task.default_config()
    with as_target(target):
        want = tensorcore_dense._dense_defaults(256, 256, 256)
    assert cfg is not None and {k: cfg[k].val for k in cfg} == want

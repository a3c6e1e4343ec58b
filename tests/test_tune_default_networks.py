"""On the zoo networks in float16 for sm_90a (CPU only: lowered and compiled to PTX with
llvmlite), every task's default candidate builds, its pipeline text is what
``graph.build``'s ``default_schedule_for`` makes for the task's function; where a sketch's
state is the default (fused attention, row-wise normalizations) that state's pipeline is
the same; and ``ApplyHistoryBest`` over those records builds the same device IR and PTX as
the build without records (the fused attention's kernel is named ``attention_kernel0``
when it comes from a record, as every tuned attention's is, and the function's name
without one: names are compared apart). About a minute for all four networks: under the
``corpus`` mark, a further step of CI."""

from __future__ import annotations

import re
import warnings

import pytest
from ptxforge import autosched, graph, measure
from ptxforge.autosched.default_candidate import (
    default_input,
    default_payload,
    default_state,
)
from ptxforge.graph.build_module import default_schedule_for
from ptxforge.network_reader import read_network
from ptxforge.target import as_target

pytestmark = pytest.mark.corpus

TARGET = "cuda -arch=sm_90a"


def _without_kernel_names(text: str, names) -> str:
    for n in names:
        text = re.sub(rf"\b{re.escape(n)}_kernel(\d+)", r"KERNEL\1", text)
    return text


@pytest.mark.parametrize("name", ["resnet_v1-18", "resnet_v1-50", "mobilenet_v2", "bert"])
def test_every_default_is_recorded_and_replays_to_the_default_build(name):
    net, params, _, _ = graph.get_network(name, 1, dtype="float32")
    tasks, _ = autosched.extract_tasks(net, params, TARGET, precision="float16")
    funcs = {f.workload_key: f for f in read_network(net, params, precision="float16")}
    options = measure.BuildOptions(target_sm="sm_90a", compile_to="ir")
    records = []
    states = 0
    for task in tasks:
        res = measure.build_candidate(default_input(task), options)
        assert int(res.error_no) == 0, (task.desc, res.error_msg)
        if "fused_attention(" not in res.pipeline_text:
            with as_target(TARGET):
                ref, _ = default_schedule_for(funcs[task.workload_key], TARGET)
            assert res.pipeline_text == ref.pipeline.text, task.desc
        # where a sketch's state is the default, the tuner measures that state instead
        state = default_state(task)
        if state is not None:
            assert state.pipeline_text(task) == res.pipeline_text, task.desc
            states += 1
        records.append((measure.MeasureInput(task.task_spec, res.pipeline_text,
                                             default_payload()),
                        measure.MeasureResult((1e-5,), 0, "", 0.0, 0.0)))
    assert len(records) == len(tasks)
    if name == "bert":  # its attention and its layer norms and softmax are states
        assert states >= 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", graph.NoTuningRecordWarning)
        plain = graph.build(net, TARGET, params, precision="float16")
    with autosched.ApplyHistoryBest(records):
        tuned = graph.build(net, TARGET, params, precision="float16")
    assert set(plain.functions) == set(tuned.functions)
    for key, f in plain.functions.items():
        g = tuned.functions[key]
        assert g.tuned, f.func.name
        names = (f.func.name, "attention")
        for a, b in ((str(f.device_module), str(g.device_module)),
                     (f.ptx.get_source("ptx"), g.ptx.get_source("ptx"))):
            assert _without_kernel_names(a, names) == _without_kernel_names(b, names), (
                f.func.name)

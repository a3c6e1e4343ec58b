"""The schedule-code printer beside the te schedule API (``passes/schedule/python_code.py``)
and the DAG that uses it (``ScheduleDAG``): the IR's ComputeDAG knows no schedules, a te
schedule's and a search task's DAG do, and both ways of naming the stages (from the DAG's
tensor IR, from a task's analysis) print the same code, which replays to the same IR."""

from __future__ import annotations

import pytest

import ptxforge
from ptxforge import te
from ptxforge.autosched.printer import python_schedule_code
from ptxforge.autosched.search_task import SearchTask
from ptxforge.ir.compute_dag import ComputeDAG
from ptxforge.passes.pipeline import SchedulePipeline
from ptxforge.passes.schedule.dag import ScheduleDAG
from ptxforge.passes.schedule.python_code import StageTable


def _matmul_relu():
    a = te.placeholder((32, 16), name="a")
    b = te.placeholder((16, 24), name="b")
    k = te.reduce_axis((0, 16), name="k")
    c = te.compute((32, 24), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="c")
    d = te.compute((32, 24), lambda i, j: te.max(c[i, j], 0.0), name="d")
    return a, b, c, d


def _schedule(a, b, c, d):
    s = te.create_schedule(d.op)
    cl = s.cache_write(c, "local")
    i, j = s[d].op.axis
    io, ii = s[d].split(i, factor=8)
    jo, ji = s[d].split(j, factor=8)
    s[d].reorder(io, jo, ii, ji)
    s[d].bind(io, te.thread_axis("blockIdx.x"))
    s[d].bind(ii, te.thread_axis("threadIdx.x"))
    s[c].compute_at(s[d], ji)
    s[cl].compute_at(s[c], s[c].op.axis[1])
    return s, cl


def test_the_ir_dag_knows_no_schedules_and_the_schedule_dags_do():
    a, b, c, d = _matmul_relu()
    for method in ("get_init_state", "print_python_code_from_state"):
        assert not hasattr(ComputeDAG, method)
        assert callable(getattr(ScheduleDAG, method))
    s = te.create_schedule(d.op)
    task = SearchTask(compute_dag=ScheduleDAG([a, b, d]), target="sim")
    from_ir = SearchTask(compute_dag=ComputeDAG([a, b, d]), target="sim").compute_dag
    for dag in (s.dag, task.compute_dag, ptxforge.ComputeDAG([a, b, d]), from_ir):
        assert isinstance(dag, ScheduleDAG)
        state = dag.get_init_state()
        assert isinstance(state, SchedulePipeline) and len(state) == 0


def test_the_dag_and_the_task_print_the_same_code_which_replays_to_the_same_ir():
    a, b, c, d = _matmul_relu()
    s, _ = _schedule(a, b, c, d)
    text = s.pipeline.text
    assert "cache_write(" in text and "compute_at(" in text
    dag = ScheduleDAG([a, b, d])
    code = dag.print_python_code_from_state(text)
    task = SearchTask(compute_dag=dag, target="sim")
    assert python_schedule_code(task, text) == code
    assert StageTable.of_dag(dag) == StageTable.of_dag(task.ir_dag)
    assert "s = te.create_schedule([d.op])" in code and ".compute_at(" in code
    ns = {"te": te, "tensors": [a, b, d]}
    exec(code, ns)
    assert str(ns["s"].module) == str(s.module)
    assert ns["s"].pipeline.text == text


def test_the_printer_names_no_stage_it_does_not_know():
    a, b, c, d = _matmul_relu()
    dag = ScheduleDAG([a, b, d])
    with pytest.raises(ValueError, match="names no known stage"):
        dag.print_python_code_from_state("split(e.i, factors=[4])")

"""A network run's cost model is made in the background (importing xgboost imports
scikit-learn and scipy: seconds before the first round could be searched): until it
learns, the deferred model scores states exactly as a new XGBModel does, without waiting
for it; its first update waits for the model, and from then on everything goes to it."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from ptxforge import autosched, measure
from ptxforge.autosched.deferred_model import DeferredModel
from ptxforge.autosched.task_scheduler import make_search_policies

from .test_autosched_search import seed_task
from .test_task_scheduler import POLICY, conv_tasks


def slow_make(gate: threading.Event, **kw):
    def make():
        gate.wait(10)
        return autosched.XGBModel(**kw)
    return make


def test_before_it_learns_the_deferred_model_scores_as_a_new_one_without_waiting():
    task = seed_task()
    pop = autosched.SketchPolicy(task, autosched.RandomModel(seed=0), POLICY,
                                 seed=0).search_one_round(16)
    gate = threading.Event()
    model = DeferredModel(slow_make(gate, num_warmup_sample=8, seed=0))
    t0 = time.monotonic()
    scores = model.predict(task, pop)
    assert time.monotonic() - t0 < 2.0 and not model.ready
    np.testing.assert_array_equal(scores, autosched.XGBModel(seed=0).predict(task, pop))
    # its first update waits for the model, then goes to it
    threading.Timer(0.2, gate.set).start()
    results = [measure.MeasureResult((1e-3 * (1 + k),), 0, "", 0.0, 0.0)
               for k in range(len(pop))]
    model.update(task, pop, results)
    assert model.ready and model.num_samples == len(pop)
    assert isinstance(model.model, autosched.XGBModel)
    # from then on its scores are the model's: trained on the samples
    np.testing.assert_array_equal(model.predict(task, pop), model.model.predict(task, pop))


def test_a_failure_to_make_the_model_is_raised_where_it_is_needed():
    def make():
        raise ImportError("no xgboost here")

    model = DeferredModel(make)
    task = seed_task()
    with pytest.raises(ImportError, match="no xgboost here"):
        model.update(task, np.zeros((0, task.state_width), dtype=np.int64), [])
    with pytest.raises(ImportError):
        model.num_samples  # noqa: B018


def test_a_network_run_defers_its_model_unless_it_starts_from_records():
    tasks = conv_tasks()
    fresh = make_search_policies("default", POLICY, tasks, 8, 0)
    assert isinstance(fresh[0].cost_model, DeferredModel)
    assert all(p.cost_model is fresh[0].cost_model for p in fresh)  # one shared model
    rows = fresh[0].search_one_round(4)
    results = [measure.MeasureResult((1e-3,), 0, "", 0.0, 0.0) for _ in rows]
    resumed = make_search_policies("default", POLICY, tasks, 8, 0, records={0: (rows, results)})
    assert isinstance(resumed[0].cost_model, autosched.XGBModel)
    assert resumed[0].cost_model.num_samples == len(rows)

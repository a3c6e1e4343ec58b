"""The auto-scheduler's cost model: incremental training (boosting on the residuals, refits
when the samples have doubled), ranking a task by the trees as soon as it (or a task with
the same anchor operators) has a few samples, and saving / loading a model to seed another
search, with clear errors on files that are not models."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from ptxforge import autosched, measure, ops, te, workloads
from ptxforge.autosched.cost_model import anchor_tag
from ptxforge.autosched.model_file import CostModelFileError
from ptxforge.autosched.search_policy import SketchPolicy
from scipy.stats import kendalltau


@autosched.register_workload
def cost_model_dense(M, N, K):
    data = te.placeholder((M, K), name="data")
    weight = te.placeholder((N, K), name="weight")
    return [data, weight, ops.nn.dense(data, weight)]


def seed_task():
    return autosched.SearchTask(func=workloads.conv2d_layer, args=workloads.SEED_ARGS)


def other_conv_task():
    return autosched.SearchTask(func=workloads.conv2d_layer,
                                args=(1, 14, 14, 256, 256, 3, 3, (1, 1), (1, 1)))


def costs(task, rows):
    """A deterministic time per state: the static estimate times a factor in [0.5, 2]
    that depends on the unroll slot and a hash of the state (something to learn)."""
    _, _, est = task.features(rows)
    h = np.array([int(hashlib.sha256(r.tobytes()).hexdigest()[:8], 16) / 0xFFFFFFFF
                  for r in np.ascontiguousarray(rows)])
    return est * (0.5 + 1.5 * h * (rows[:, -1] % 2 + 0.5) / 1.5)


def population(task, n, seed=0):
    return SketchPolicy(task, autosched.RandomModel(), seed=seed).sample_initial_population(n)


def results(task, rows):
    return [measure.MeasureResult((c,), 0, "", 0.0, 0.0) for c in costs(task, rows)]


def train_loss(model):
    import xgboost as xgb

    s = model.samples
    d = xgb.DMatrix(s.features, base_margin=s.margins,
                    feature_names=list(autosched.FEATURE_NAMES))
    return float(np.mean((model.booster.predict(d) - s.labels) ** 2))


@pytest.fixture(scope="module")
def data():
    task = seed_task()
    pop = population(task, 400)
    return task, pop, results(task, pop)


def test_an_update_boosts_a_few_trees_and_lowers_the_training_loss(data):
    task, pop, res = data
    model = autosched.XGBModel(min_task_samples=0, num_rounds=20, trees_per_update=4)
    model.update(task, pop[:128], res[:128])
    model.train()
    assert model.num_trees == 20
    for k in range(128, 224, 32):
        model.update(task, pop[k: k + 32], res[k: k + 32])
        before = train_loss(model)  # the trees so far, on the old and the new samples
        model.train()
        after = train_loss(model)
        assert after < before, (k, before, after)
    assert model.num_trees == 20 + 3 * 4  # 224 < 2 * 128 samples: no refit yet
    model.train()  # nothing new: nothing trained
    assert model.num_trees == 32 and len(model.update_seconds) == 4


def test_incremental_predictions_agree_with_a_refit(data):
    task, pop, res = data
    inc = autosched.XGBModel(min_task_samples=0, num_rounds=30, refit_growth=4.0)
    for k in range(0, 240, 48):
        inc.update(task, pop[k: k + 16], res[k: k + 16])
        inc.train()
    assert inc.num_trees > inc.num_rounds  # the last updates were incremental
    scratch = autosched.XGBModel(min_task_samples=0, num_rounds=30)
    scratch.update(task, pop[:240], res[:240])
    scratch.refit()
    test = pop[240:]
    feats, _, est = task.features(test)
    a = inc.predict_log(task, feats, est)
    b = scratch.predict_log(task, feats, est)
    assert kendalltau(a, b).statistic > 0.8
    assert np.abs(a - b).mean() < 0.4  # log2 throughput: within about 30 % on average
    truth = -np.log2(costs(task, test))
    assert kendalltau(a, truth).statistic > 0.5


def test_a_refit_when_the_samples_doubled_equals_training_from_scratch(data):
    task, pop, res = data
    inc = autosched.XGBModel(min_task_samples=0, num_rounds=30, refit_growth=2.0)
    inc.update(task, pop[:64], res[:64])
    inc.train()
    for k in range(64, 128, 32):
        inc.update(task, pop[k: k + 32], res[k: k + 32])
        inc.train()  # the last one reaches 128 = 2 * 64 samples: a refit
    assert inc.num_trees == inc.num_rounds
    fresh = autosched.XGBModel(min_task_samples=0, num_rounds=30)
    fresh.update(task, pop[:128], res[:128])
    fresh.train()
    feats, _, est = task.features(pop[200:])
    np.testing.assert_array_equal(inc.predict_log(task, feats, est),
                                  fresh.predict_log(task, feats, est))


def test_trees_rank_a_task_after_its_first_samples_not_after_a_global_warm_up(data):
    task, pop, res = data
    model = autosched.XGBModel(num_warmup_sample=1000, min_task_samples=16, num_rounds=20)
    feats, _, est = task.features(pop[300:])
    prior = model.predict(task, pop[300:], feats, est)
    model.update(task, pop[:8], res[:8])
    assert not model.uses_trees_for(task)
    np.testing.assert_array_equal(model.predict(task, pop[300:], feats, est), prior)
    model.update(task, pop[8:32], res[8:32])
    assert model.uses_trees_for(task)  # 32 samples of 1000: the task's own are enough
    assert not np.array_equal(model.predict(task, pop[300:], feats, est), prior)
    # a convolution of another shape shares the anchor operator: the trees rank it too
    other = other_conv_task()
    assert anchor_tag(other) == anchor_tag(task) != ""
    assert model.uses_trees_for(other)
    # a dense layer does not: the analytical ranking until it has samples of its own
    dense = autosched.SearchTask(func=cost_model_dense, args=(16, 256, 256))
    assert anchor_tag(dense) != anchor_tag(task) and not model.uses_trees_for(dense)


def test_a_saved_model_loads_with_the_same_predictions_and_keeps_learning(data, tmp_path):
    task, pop, res = data
    model = autosched.XGBModel(min_task_samples=0, num_rounds=20)
    model.update(task, pop[:160], res[:160])
    path = tmp_path / "model.npz"
    model.save(str(path))
    loaded = autosched.XGBModel(num_warmup_sample=10**6)
    loaded.load(str(path))
    assert loaded.num_samples == 160 and loaded.num_trees == model.num_trees
    # other networks' samples weigh less than this run's when the trees are trained again
    np.testing.assert_allclose(loaded.samples.weights, loaded.transfer_weight)
    other = other_conv_task()
    opop = population(other, 120, seed=2)
    feats, _, est = other.features(opop)
    # transfer: the new task has no samples, its anchor operator has 160
    assert loaded.uses_trees_for(other)
    np.testing.assert_allclose(loaded.predict_log(other, feats, est),
                               model.predict_log(other, feats, est), rtol=1e-6)
    # the warm-up counts this run's samples: a dense layer waits for samples of its own
    small_warmup = autosched.XGBModel(num_warmup_sample=32)
    small_warmup.load(str(path))
    dense = autosched.SearchTask(func=cost_model_dense, args=(16, 256, 256))
    assert small_warmup.uses_trees_for(other) and not small_warmup.uses_trees_for(dense)
    loaded.update(other, opop[:32], results(other, opop[:32]))
    loaded.train()  # the first samples of this run: a refit on the loaded ones and these
    assert loaded.num_samples == 192 and loaded.num_trees == loaded.num_rounds
    loaded.update(other, opop[32:48], results(other, opop[32:48]))
    loaded.train()  # then trees on the residuals until this run's samples double
    assert loaded.num_samples == 208 and loaded.num_trees == loaded.num_rounds + 8
    # a model with samples of its own refits on both after loading
    mixed = autosched.XGBModel(min_task_samples=0, num_rounds=30)
    mixed.update(other, opop[:32], results(other, opop[:32]))
    mixed.load(str(path))
    assert mixed.num_samples == 192
    assert np.isfinite(mixed.predict(other, opop[32:])).all()


def test_bad_model_files_are_refused_with_a_reason(data, tmp_path):
    model = autosched.XGBModel()
    with pytest.raises(FileNotFoundError, match="does not exist"):
        model.load(str(tmp_path / "none.npz"))
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"this is not a model")
    with pytest.raises(CostModelFileError, match="not a ptxforge cost model file"):
        model.load(str(junk))
    other = tmp_path / "other.npz"
    np.savez(other, weights=np.zeros(3))
    with pytest.raises(CostModelFileError, match="missing format"):
        model.load(str(other))
    task, pop, res = data
    good = autosched.XGBModel(num_rounds=5)
    good.update(task, pop[:40], res[:40])
    path = tmp_path / "m.npz"
    good.save(str(path))
    with np.load(path) as z:
        fields = {k: z[k] for k in z.files}
    fields["feature_names"] = fields["feature_names"][::-1]
    np.savez(tmp_path / "renamed.npz", **fields)
    with pytest.raises(CostModelFileError, match="other features"):
        model.load(str(tmp_path / "renamed.npz"))
    fields["feature_names"] = fields["feature_names"][::-1]
    fields["labels"] = fields["labels"][:-1]
    np.savez(tmp_path / "cut.npz", **fields)
    with pytest.raises(CostModelFileError, match="damaged"):
        model.load(str(tmp_path / "cut.npz"))
    assert model.num_samples == 0  # nothing was half loaded
    with pytest.raises(ValueError, match="no samples"):
        autosched.XGBModel().save(str(tmp_path / "empty.npz"))


def test_bad_parameters_are_refused():
    with pytest.raises(ValueError, match="refit_growth"):
        autosched.XGBModel(refit_growth=1.0)
    with pytest.raises(ValueError, match="transfer_weight"):
        autosched.XGBModel(transfer_weight=0.0)
    with pytest.raises(ValueError, match="trees_per_update"):
        autosched.XGBModel(trees_per_update=0)

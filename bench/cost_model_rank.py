"""Rank quality of the auto-scheduler's cost model, without a GPU.

    python3 bench/cost_model_rank.py \
        --data resnet_v1-18=bench/results/costmodel_resnet_v1-18_sim.json \
        --data mobilenet_v2=bench/results/costmodel_mobilenet_v2_sim.json --seeds 3

The "truth" is the record files of ``bench/cost_model_data.py``: candidates of each
network's heaviest tasks with the times the simulator runner estimates from their lowered
kernels. For every task and seed the records are shuffled; the last ``--test`` of them are
held out, and the models learn from the others in rounds of 16, as a search would. After
16/32/64/128 samples of the task each model ranks the held-out states; the figures are
Kendall's tau against the truth and the recall of the true top 8 among the predicted top 8,
averaged over tasks and seeds; and the CPU seconds of the update that led there.
Models:

* ``analytical``: the search's own estimate (what ranks states before any training);
* ``previous``: the model as it was (normalized throughput, 120 trees, depth 8, refitted
  from scratch every round, no estimate as base margin);
* ``scratch``: :class:`~ptxforge.autosched.XGBModel` refitted from scratch every round;
* ``incremental``: the same model as it trains in a search: 8 trees per round on the
  residuals, a refit when the samples doubled (16, 32, 64, 128 are refit points, so there
  it equals ``scratch``);
* ``boosted``: never refitted after its first fit (8 trees per round on the residuals);
* ``transfer``: ``incremental`` seeded with the samples and trees of the *other*
  network's records (every task of it), saved and loaded as ``--load-model`` does, the
  loaded samples weighing 0.3 (``transfer w=1``: as much as the task's own).

It also times one update at 1,000 and 10,000 samples, incremental against from scratch,
and replays a pool search (each round measures the 16 best-ranked states of the pool not
measured yet; the figure is the best time found relative to the pool's best).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
from scipy.stats import kendalltau

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cost_model_data import network_tasks  # noqa: E402

from ptxforge.autosched import XGBModel  # noqa: E402
from ptxforge.autosched.cost_model import (  # noqa: E402
    _records_by_task,
    base_margin,
    log_throughputs,
)

CHECKPOINTS = (16, 32, 64, 128)
ROUND = 16
TOP = 8


class TaskData:
    """One task's records: features, analytical estimates, labels (log2 throughput)."""

    def __init__(self, network: str, task, rows, results):
        self.network = network
        self.task = task
        self.rows = rows
        self.results = results
        self.feats, _, self.est = task.features(rows)
        self.labels = log_throughputs(task, results, self.est)
        self.ok = np.array([int(r.error_no) == 0 for r in results])


def load(network: str, log: str, dtype: str) -> list:
    network_tasks(network, dtype)  # registers the workloads the records name
    return [TaskData(network, t, rows, res) for t, rows, res in _records_by_task(log)
            if len(rows) >= max(CHECKPOINTS) + 48]


class Previous:
    """The model before this change: normalized throughput, refitted every round."""

    def __init__(self, seed: int):
        self.x, self.y, self.keys, self.seed = [], [], [], seed
        self.booster = None

    def add(self, td: TaskData, idx) -> None:
        self.x.append(td.feats[idx])
        self.y.append(np.where(td.ok[idx], np.exp2(td.labels[idx]), 0.0))
        self.keys += [td.task.workload_key] * len(idx)

    def fit(self) -> float:
        import xgboost as xgb

        t0 = time.process_time()
        x, tp, keys = np.concatenate(self.x), np.concatenate(self.y), np.array(self.keys)
        y = np.zeros_like(tp)
        for k in np.unique(keys):
            m = keys == k
            if tp[m].max() > 0:
                y[m] = tp[m] / tp[m].max()
        params = {"max_depth": 8, "eta": 0.2, "gamma": 1e-3, "min_child_weight": 1.0,
                  "objective": "reg:squarederror", "seed": self.seed, "nthread": 1,
                  "tree_method": "hist", "verbosity": 0}
        self.booster = xgb.train(params, xgb.DMatrix(x, label=y, weight=0.25 + y),
                                 num_boost_round=120)
        return time.process_time() - t0

    def predict(self, td: TaskData, idx) -> np.ndarray:
        import xgboost as xgb

        prior = base_margin(td.task, td.est[idx])
        return self.booster.predict(xgb.DMatrix(td.feats[idx])) + 1e-3 * prior / prior.max()


def scores(truth: np.ndarray, pred: np.ndarray) -> tuple:
    tau = kendalltau(pred, truth).statistic
    top_true = set(np.argsort(-truth, kind="stable")[:TOP].tolist())
    top_pred = set(np.argsort(-pred, kind="stable")[:TOP].tolist())
    return float(tau), len(top_true & top_pred) / TOP


def transfer_model(others: list, seed: int, weight: float = 0.3) -> XGBModel:
    """A model seeded as ``--load-model`` seeds it: trained on ``others``, saved, loaded
    (the loaded samples weigh ``weight`` when the trees are trained again)."""
    import tempfile

    m = XGBModel(seed=seed, num_warmup_sample=1 << 30)
    for td in others:
        m.update(td.task, td.rows, td.results)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.npz")
        m.save(path)
        out = XGBModel(seed=seed, min_task_samples=0, transfer_weight=weight)
        out.load(path)
    return out


def evaluate(td: TaskData, others: list, seed: int, n_test: int) -> dict:
    """Figures of every model at every checkpoint for one task and seed."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(td.rows))
    test, train = order[-n_test:], order[:-n_test]
    truth = td.labels[test]
    out: dict = {}

    def note(name, n, pred, seconds=None):
        tau, rec = scores(truth, pred)
        out.setdefault(name, {})[n] = {"tau": tau, "recall": rec, "s": seconds}

    base = base_margin(td.task, td.est[test])
    for n in (0,) + CHECKPOINTS:
        note("analytical", n, base)
    models = {"scratch": XGBModel(seed=seed, min_task_samples=0),
              "incremental": XGBModel(seed=seed, min_task_samples=0),
              # never refitted: the first fit, then 8 trees per round on the residuals
              "boosted": XGBModel(seed=seed, min_task_samples=0, refit_growth=1e9,
                                  max_trees=1 << 20)}
    if others:
        models["transfer"] = transfer_model(others, seed)
        models["transfer w=1"] = transfer_model(others, seed, 1.0)
        for name in ("transfer", "transfer w=1"):
            note(name, 0, models[name].predict_log(td.task, td.feats[test], td.est[test]))
    prev = Previous(seed)
    for k in range(0, min(max(CHECKPOINTS), len(train)), ROUND):
        idx = train[k: k + ROUND]
        n = k + len(idx)
        prev.add(td, idx)
        t_prev = prev.fit()
        for name, m in models.items():
            m.update(td.task, td.rows[idx], [td.results[i] for i in idx])
            if name == "scratch":
                t0 = time.process_time()
                m.refit()
                m.update_seconds.append(time.process_time() - t0)
            else:
                m.train()
        if n in CHECKPOINTS:
            note("previous", n, prev.predict(td, test), t_prev)
            for name, m in models.items():
                note(name, n, m.predict_log(td.task, td.feats[test], td.est[test]),
                     m.update_seconds[-1])
    return out


def pool_search(td: TaskData, others: list, seed: int, trials: int = 64) -> dict:
    """Best time found (relative to the pool's best) after 16/32/64 trials when every
    round measures the 16 states of the record pool that the model ranks best."""
    best_true = td.labels[td.ok].max()
    out = {}
    for name in ("analytical", "incremental", "transfer"):
        if name == "transfer" and not others:
            continue
        m = (transfer_model(others, seed) if name == "transfer"
             else XGBModel(seed=seed, min_task_samples=0))
        left = np.ones(len(td.rows), dtype=bool)
        found, curve = -np.inf, {}
        rng = np.random.default_rng(seed)
        for n in range(ROUND, trials + 1, ROUND):
            cand = np.nonzero(left)[0]
            if name == "analytical":
                pred = base_margin(td.task, td.est[cand])
            else:
                pred = m.predict_log(td.task, td.feats[cand], td.est[cand])
            pred = pred + 1e-9 * rng.random(len(cand))  # ties: at random
            pick = cand[np.argsort(-pred)[:ROUND]]
            left[pick] = False
            found = max(found, td.labels[pick][td.ok[pick]].max(initial=-np.inf))
            if name != "analytical":
                m.update(td.task, td.rows[pick], [td.results[i] for i in pick])
            curve[n] = float(np.exp2(found - best_true))
        out[name] = curve
    return out


def update_times(data: list, seed: int = 0) -> dict:
    """Seconds of one training step at about 1k and 10k samples: incremental (a round of
    64 more samples boosted on top) and from scratch."""
    out = {}
    pool = [td for td in data]
    for size in (1000, 10000):
        m = XGBModel(seed=seed, min_task_samples=0)
        k = 0
        while m.num_samples < size:
            td = pool[k % len(pool)]
            m.update(td.task, td.rows, td.results)
            k += 1
        m.train()
        td = pool[0]
        m.update(td.task, td.rows[:64], td.results[:64])
        t0 = time.process_time()
        m.train()
        inc = time.process_time() - t0
        t0 = time.process_time()
        m.refit()
        scratch = time.process_time() - t0
        prev = Previous(seed)
        prev.x, prev.y = [m.samples.features], [np.exp2(m.samples.labels)]
        prev.keys = list(m.samples.keys)
        out[size] = {"samples": m.num_samples, "incremental_s": inc, "scratch_s": scratch,
                     "previous_s": prev.fit()}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", action="append", required=True, metavar="NETWORK=LOG")
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--test", type=int, default=48, help="held-out states per task")
    ap.add_argument("--json", help="write the figures here")
    a = ap.parse_args()
    nets = {}
    for spec in a.data:
        name, log = spec.split("=", 1)
        nets[name] = load(name, log, a.dtype)
        print(f"{name}: {len(nets[name])} tasks, "
              f"{sum(len(t.rows) for t in nets[name])} records", flush=True)
    agg: dict = {}
    pools: dict = {}
    for name, tds in nets.items():
        others = [td for other, ts in nets.items() if other != name for td in ts]
        for td in tds:
            for seed in range(a.seeds):
                res = evaluate(td, others, seed, a.test)
                for model, by_n in res.items():
                    for n, f in by_n.items():
                        agg.setdefault(model, {}).setdefault(n, []).append(f)
                for model, curve in pool_search(td, others, seed).items():
                    for n, v in curve.items():
                        pools.setdefault(model, {}).setdefault(n, []).append(v)
    table = {}
    print(f"\nheld-out rank quality (mean over tasks and {a.seeds} seeds): Kendall tau / "
          f"recall of the top {TOP} / seconds per update")
    print(f"{'model':<12}" + "".join(f"{n:>22d}" for n in (0,) + CHECKPOINTS))
    for model, by_n in agg.items():
        cells = []
        for n in (0,) + CHECKPOINTS:
            fs = by_n.get(n)
            if not fs:
                cells.append(f"{'-':>22s}")
                continue
            tau = np.mean([f["tau"] for f in fs])
            rec = np.mean([f["recall"] for f in fs])
            secs = [f["s"] for f in fs if f["s"] is not None]
            sec = f" {np.mean(secs) * 1e3:5.0f}ms" if secs else " " * 8
            cells.append(f"{tau:9.3f} /{rec:5.2f}{sec}")
            table.setdefault(model, {})[n] = {"tau": tau, "recall": rec,
                                              "s": np.mean(secs) if secs else None}
        print(f"{model:<12}" + "".join(f"{c:>22s}" for c in cells))
    print("\npool search: best found / pool best after 16, 32, 64 trials")
    for model, curve in pools.items():
        print(f"{model:<12}" + "".join(f"{np.mean(v):10.3f}" for v in curve.values()))
    times = update_times([td for tds in nets.values() for td in tds])
    print("\nCPU seconds per training step (incremental = one round of 64 boosted on top)")
    for t in times.values():
        print(f"  {t['samples']:6d} samples: incremental {t['incremental_s']:.3f} s, from "
              f"scratch {t['scratch_s']:.3f} s, previous model {t['previous_s']:.3f} s")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rank": table, "pool": {m: {n: float(np.mean(v)) for n, v in c.items()}
                                               for m, c in pools.items()},
                       "update_times": times}, f, indent=1)


if __name__ == "__main__":
    main()

"""Refused tile states repaired instead of drawn again (autosched/repair.py): repaired states
pass the kernel model's whole check (the unrolled-code cap included), the repair is
deterministic under a seed and moves only what a limit needs, and a task whose uniform
draws are nearly all refused gets a full, varied population from a bounded number of
draws."""

from __future__ import annotations

import numpy as np
import pytest

from ptxforge import autosched, workloads
from ptxforge.autosched.evolution import random_population, unique_rows
from ptxforge.autosched.factorization import prime_factors, tile_table
from ptxforge.autosched.hardware import HardwareParams
from ptxforge.autosched.kernel_model import MAX_UNROLLED_PER_THREAD
from ptxforge.autosched.repair import outward_moves, repair_rows, repairable
from ptxforge.autosched.search_policy import SketchPolicy
from ptxforge.autosched.sketch import ChoiceSlot, TileSlot

TARGET = "cuda -arch=sm_90a"


@pytest.fixture(scope="module")
def seed_task():
    return autosched.SearchTask(func=workloads.conv2d_layer, args=workloads.SEED_ARGS,
                                target=TARGET)


@pytest.fixture(scope="module")
def rare_task():
    """The seed layer on a GPU of 4 accumulators and 4 KiB of shared memory a block: about
    one uniform tile draw in 300 passes."""
    hw = HardwareParams.from_target(TARGET, max_accumulators_per_thread=4,
                                    max_shared_memory_per_block=4096)
    return autosched.SearchTask(func=workloads.conv2d_layer, args=workloads.SEED_ARGS,
                                target=TARGET, hardware_params=hw)


def tile_sketches(task) -> list:
    return [s for s, m in enumerate(task.models) if repairable(m)]


def draws(task, s: int, n: int, seed: int) -> np.ndarray:
    one = np.eye(len(task.sketches))[s]
    width = len(task.sketches[s].slots)
    return random_population(task, n, np.random.default_rng(seed), one)[:, 1: 1 + width]


def test_outward_moves_move_the_smallest_prime_of_a_level_outward():
    for extent, levels in ((1, 3), (12, 3), (112, 5), (768, 4), (49, 5)):
        table = tile_table(extent, levels)
        for target in range(levels):
            moves = outward_moves(extent, levels, target)
            for k, row in enumerate(table.rows.tolist()):
                for lv in range(levels):
                    got = table.rows[moves[k, lv]].tolist()
                    if lv == target or row[lv] == 1:
                        assert got == row
                        continue
                    p = prime_factors(row[lv])[0]
                    want = list(row)
                    want[lv] //= p
                    want[target] *= p
                    assert got == want, (extent, levels, target, row, lv)


def test_repaired_states_pass_the_whole_check_and_the_cap(seed_task):
    for s in tile_sketches(seed_task):
        model = seed_task.models[s]
        rows = draws(seed_task, s, 1500, s)
        drawn_ok = model.valid(rows)
        assert drawn_ok.mean() < 0.2  # mostly refused as drawn
        r = repair_rows(model, rows, np.random.default_rng(0))
        # the states valid as drawn are kept as they were; nearly all others repaired
        assert (r.rows[drawn_ok] == rows[drawn_ok]).all() and r.valid[drawn_ok].all()
        assert r.repaired.sum() >= 0.9 * (~drawn_ok).sum()
        assert (r.valid == (drawn_ok | r.repaired)).all()
        fixed = r.rows[r.repaired]
        kernels = model.kernels(fixed)
        assert model.valid(fixed, kernels).all()
        tile = next(k for kind, k in kernels if kind == "tile")
        assert (tile["unrolled_code"] <= MAX_UNROLLED_PER_THREAD).all()
        # the states a repair gave up on are returned as drawn and marked refused
        assert not model.valid(r.rows[~r.valid]).any()
        # still states of the sketch: exact tiles, choices in range
        assert ((fixed >= 0) & (fixed < model.sketch.sizes)).all()
        for j, slot in enumerate(model.sketch.slots):
            if isinstance(slot, TileSlot):
                assert (slot.table.rows[fixed[:, j]].prod(axis=1) == slot.extent).all()


def test_a_repair_moves_factors_outward_and_lowers_unroll_only(seed_task):
    s = tile_sketches(seed_task)[0]
    model = seed_task.models[s]
    sketch = model.sketch
    rows = draws(seed_task, s, 800, 7)
    r = repair_rows(model, rows, np.random.default_rng(1))
    rep = r.repaired
    for j, slot in enumerate(sketch.slots):
        before, after = rows[rep, j], r.rows[rep, j]
        if isinstance(slot, TileSlot):
            # the outermost level (blocks, or the outer reduce loop) only gains factors
            b, a = slot.table.rows[before], slot.table.rows[after]
            assert (a[:, 0] % b[:, 0] == 0).all(), slot.name
        elif slot.name.endswith("unroll"):
            assert (np.asarray(slot.choices)[after] <= np.asarray(slot.choices)[before]).all()
        else:
            assert isinstance(slot, ChoiceSlot)
            assert (after == before).all(), slot.name  # vector widths are kept


def test_the_repair_is_deterministic_under_a_seed(seed_task):
    s = tile_sketches(seed_task)[-1]
    model = seed_task.models[s]
    rows = draws(seed_task, s, 600, 3)
    a = repair_rows(model, rows, np.random.default_rng(5))
    b = repair_rows(model, rows, np.random.default_rng(5))
    c = repair_rows(model, rows, np.random.default_rng(6))
    assert (a.rows == b.rows).all() and (a.valid == b.valid).all() and a.rounds == b.rounds
    assert (a.rows != c.rows).any(axis=1).sum() > 0.3 * a.repaired.sum()
    p1 = SketchPolicy(seed_task, autosched.RandomModel(), seed=4, params={"repair_below": 1.0})
    p2 = SketchPolicy(seed_task, autosched.RandomModel(), seed=4, params={"repair_below": 1.0})
    assert (p1.sample_initial_population(300) == p2.sample_initial_population(300)).all()


def test_repaired_draws_stay_distinct_and_spread(seed_task):
    s = tile_sketches(seed_task)[0]
    model = seed_task.models[s]
    r = repair_rows(model, draws(seed_task, s, 1000, 11), np.random.default_rng(2))
    rep = r.rows[r.valid]
    assert len(rep) >= 990 and len(unique_rows(rep)) >= 0.98 * len(rep)
    # against the states that pass as drawn: the same range of launch shapes, with more
    # blocks (the repair moves factors out to the block level: about 3x here) and fewer
    # threads and accumulators a block
    ok = draws(seed_task, s, 20000, 12)
    ok = ok[model.valid(ok)]
    tile_rep = next(k for kind, k in model.kernels(rep) if kind == "tile")
    tile_ok = next(k for kind, k in model.kernels(ok) if kind == "tile")
    for key in ("threads", "blocks", "accum"):
        a, b = np.log2(tile_rep[key]), np.log2(tile_ok[key])
        assert abs(a.mean() - b.mean()) < 2.0, key
        assert len(np.unique(tile_rep[key])) >= 0.7 * len(np.unique(tile_ok[key])), key


def test_the_limits_only_check_is_the_models_check(seed_task, rare_task):
    for task in (seed_task, rare_task):
        for s, model in enumerate(task.models):
            rows = draws(task, s, 400, s)
            lean = np.ones(len(rows), dtype=bool)
            for _, _, stats in model.step_kernels(rows, limits_only=True):
                lean &= stats["valid"]
            assert (lean == model.valid(rows)).all()


def test_rare_valid_states_come_from_few_draws(rare_task):
    width = rare_task.state_width
    pol = SketchPolicy(rare_task, autosched.RandomModel(), seed=0, verbose=0)
    pop = pol.sample_initial_population(512)
    _, valid, _ = rare_task.features(pop)
    assert len(pop) == 512 and valid.all() and len(unique_rows(pop)) == 512
    counts = pol.draw_counts
    assert counts["refused"] > 0.3 * counts["drawn"] and counts["repaired"] > 200
    assert counts["drawn"] <= 4 * 512
    # every tile sketch gets its share, and a varied one (the 7-wide spatial axes can only
    # be split 7 x 1 or 1 x 7 under 4 accumulators; the long axes take many values)
    for s in tile_sketches(rare_task):
        mine = pop[pop[:, 0] == s, 1: width]
        assert len(mine) >= 100
        for j, slot in enumerate(rare_task.sketches[s].slots):
            if isinstance(slot, TileSlot) and slot.size > 50:
                assert len(np.unique(mine[:, j])) >= 20, slot.name
    # drawing again instead: many times the draws for the same population
    rej = SketchPolicy(rare_task, autosched.RandomModel(), seed=0, verbose=0,
                       params={"repair_below": 0.0})
    assert len(rej.sample_initial_population(512)) >= 400
    assert rej.draw_counts["repaired"] == 0
    assert rej.draw_counts["drawn"] > 20 * counts["drawn"]


def test_draws_that_pass_often_are_not_repaired(seed_task):
    # the seed layer's tile sketches pass 5-9% of uniform draws on an H100: drawing again
    # costs no more than a repair there, and keeps the draws uniform over the valid states
    pol = SketchPolicy(seed_task, autosched.RandomModel(), seed=1, verbose=0)
    pop = pol.sample_initial_population(256)
    assert len(pop) == 256 and pol.draw_counts["repaired"] == 0
    assert pol.draw_counts["refused"] > 0


def test_one_round_fits_threads_vthreads_and_accumulators(seed_task, rare_task, monkeypatch):
    # a pull multiplies or divides these by the prime it moves, so the repair follows them
    # exactly: after one round none is over its limit (shared memory and code may still be)
    from ptxforge.autosched import repair

    monkeypatch.setattr(repair, "MAX_ROUNDS", 1)
    for task in (seed_task, rare_task):
        hw = task.hardware_params
        for s in tile_sketches(task):
            model = task.models[s]
            rows = draws(task, s, 800, 21)
            r = repair_rows(model, rows, np.random.default_rng(3))
            tile = next(k for kind, k in model.kernels(r.rows) if kind == "tile")
            assert (tile["threads"] <= hw.max_threads_per_block).all()
            assert (tile["vthreads"] <= hw.max_vthread_extent).all()
            assert (tile["accum"] <= hw.max_accumulators_per_thread).all()
            assert r.rounds == 1 and r.valid.mean() > 2 * model.valid(rows).mean()

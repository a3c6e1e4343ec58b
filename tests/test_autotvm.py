"""autotvm/: config spaces, templates and tasks, tuners, records and dispatch."""

from __future__ import annotations

import io
import math
import re
import warnings

import numpy as np
import pytest
from ptxforge import autotvm, ops, te, workloads
from ptxforge.autotvm.feature import CURVE_WIDTH, ITERVAR_WIDTH, FeatureCache
from ptxforge.autotvm.space import ConfigEntity, ConfigSpace, SplitSpace, get_factors
from ptxforge.autotvm.tuner import (
    GATuner,
    GridSearchTuner,
    RandomTuner,
    XGBTuner,
    submodular_pick,
)
from ptxforge.measure import LocalBuilder, MeasureErrorNo, MeasureResult, load_records

# -- templates ----------------------------------------------------------------------------------


@autotvm.template("test/conv2d_no_batching")
def conv2d_no_batching(N, H, W, CO, CI, KH, KW, stride, padding):
    """The tutorial's template (as examples/tune_conv2d_autotvm.py has it)."""
    data = te.placeholder((N, CI, H, W), name="data")
    kernel = te.placeholder((CO, CI, KH, KW), name="kernel")
    conv = ops.nn.conv2d_nchw(data, kernel, stride, padding, dilation=1, out_dtype="float32")
    s = te.create_schedule([conv.op])
    n, f, y, x = s[conv].op.axis
    rc, ry, rx = s[conv].op.reduce_axis
    cfg = autotvm.get_config()
    cfg.define_split("tile_f", f, num_outputs=4)
    cfg.define_split("tile_y", y, num_outputs=4)
    cfg.define_split("tile_x", x, num_outputs=4)
    cfg.define_split("tile_rc", rc, num_outputs=3)
    cfg.define_split("tile_ry", ry, num_outputs=3)
    cfg.define_split("tile_rx", rx, num_outputs=3)
    cfg.define_knob("auto_unroll_max_step", [0, 512, 1500])
    cfg.define_knob("unroll_explicit", [0, 1])
    pad_data = conv.op.input_tensors[0]
    s[pad_data].compute_inline()
    data, raw_data = pad_data, data
    output = conv
    OL = s.cache_write(conv, "local")
    AA = s.cache_read(data, "shared", [OL])
    WW = s.cache_read(kernel, "shared", [OL])
    AL = s.cache_read(AA, "local", [OL])
    WL = s.cache_read(WW, "local", [OL])
    n, f, y, x = s[output].op.axis
    bf, vf, tf, fi = cfg["tile_f"].apply(s, output, f)
    by, vy, ty, yi = cfg["tile_y"].apply(s, output, y)
    bx, vx, tx, xi = cfg["tile_x"].apply(s, output, x)
    kernel_scope = n
    s[output].reorder(n, bf, by, bx, vf, vy, vx, tf, ty, tx, fi, yi, xi)
    for ax, tag in ((bf, "blockIdx.z"), (by, "blockIdx.y"), (bx, "blockIdx.x"),
                    (vf, "vthread"), (vy, "vthread"), (vx, "vthread"), (tf, "threadIdx.z"),
                    (ty, "threadIdx.y"), (tx, "threadIdx.x")):
        s[output].bind(ax, te.thread_axis(tag))
    s[OL].compute_at(s[output], tx)
    n, f, y, x = s[OL].op.axis
    rc, ry, rx = s[OL].op.reduce_axis
    rco, rcm, rci = cfg["tile_rc"].apply(s, OL, rc)
    ryo, rym, ryi = cfg["tile_ry"].apply(s, OL, ry)
    rxo, rxm, rxi = cfg["tile_rx"].apply(s, OL, rx)
    s[OL].reorder(rco, ryo, rxo, rcm, rym, rxm, rci, ryi, rxi, n, f, y, x)
    s[AA].compute_at(s[OL], rxo)
    s[WW].compute_at(s[OL], rxo)
    s[AL].compute_at(s[OL], rxm)
    s[WL].compute_at(s[OL], rxm)
    for load in [AA, WW]:
        n, f, y, x = s[load].op.axis
        fused = s[load].fuse(n, f, y, x)
        tz, fused = s[load].split(fused, nparts=cfg["tile_f"].size[2])
        ty, fused = s[load].split(fused, nparts=cfg["tile_y"].size[2])
        tx, fused = s[load].split(fused, nparts=cfg["tile_x"].size[2])
        s[load].bind(tz, te.thread_axis("threadIdx.z"))
        s[load].bind(ty, te.thread_axis("threadIdx.y"))
        s[load].bind(tx, te.thread_axis("threadIdx.x"))
    s[output].pragma(kernel_scope, "auto_unroll_max_step", cfg["auto_unroll_max_step"].val)
    s[output].pragma(kernel_scope, "unroll_explicit", cfg["unroll_explicit"].val)
    return s, [raw_data, kernel, conv]


@autotvm.template("test/matmul")
def matmul(N, L, M):
    """A small GPU matmul: one output per thread, tiles of threads per block."""
    A = te.placeholder((N, L), name="A")
    B = te.placeholder((L, M), name="B")
    k = te.reduce_axis((0, L), name="k")
    C = te.compute((N, M), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    y, x = s[C].op.axis
    cfg = autotvm.get_config()
    cfg.define_split("tile_y", y, num_outputs=2)
    cfg.define_split("tile_x", x, num_outputs=2)
    cfg.define_knob("unroll", [0, 16])
    yo, yi = cfg["tile_y"].apply(s, C, y)
    xo, xi = cfg["tile_x"].apply(s, C, x)
    s[C].reorder(yo, xo, yi, xi)
    s[C].bind(yo, te.thread_axis("blockIdx.y"))
    s[C].bind(xo, te.thread_axis("blockIdx.x"))
    s[C].bind(yi, te.thread_axis("threadIdx.y"))
    s[C].bind(xi, te.thread_axis("threadIdx.x"))
    s[C].pragma(yo, "auto_unroll_max_step", cfg["unroll"].val)
    return s, [A, B, C]


@autotvm.template("test/big_space")
def big_space(n):
    """A large space over a trivial schedule (for tuners driven by a synthetic cost)."""
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    s = te.create_schedule(B.op)
    cfg = autotvm.get_config()
    cfg.define_split("a", 1024, num_outputs=3)
    cfg.define_split("b", 1024, num_outputs=3)
    cfg.define_split("c", 512, num_outputs=3)
    cfg.define_knob("k", list(range(8)))
    (i,) = s[B].op.axis
    s[B].bind(i, te.thread_axis("threadIdx.x"))
    return s, [A, B]


SEED_ARGS = (1, 7, 7, 512, 512, 3, 3, (1, 1), (1, 1))
TUTORIAL_SPACE = """ConfigSpace (len=10454400, space_map=
   0 tile_f: Split(policy=factors, product=512, num_outputs=4) len=220
   1 tile_y: Split(policy=factors, product=7, num_outputs=4) len=4
   2 tile_x: Split(policy=factors, product=7, num_outputs=4) len=4
   3 tile_rc: Split(policy=factors, product=512, num_outputs=3) len=55
   4 tile_ry: Split(policy=factors, product=3, num_outputs=3) len=3
   5 tile_rx: Split(policy=factors, product=3, num_outputs=3) len=3
   6 auto_unroll_max_step: OtherOption([0, 512, 1500]) len=3
   7 unroll_explicit: OtherOption([0, 1]) len=2
)"""

# configs the tutorial printed with their indices
TUTORIAL_CONFIGS = [
    "[('tile_f', [-1, 32, 1, 2]), ('tile_y', [-1, 1, 1, 1]), ('tile_x', [-1, 1, 1, 1]), "
    "('tile_rc', [-1, 2, 1]), ('tile_ry', [-1, 3, 1]), ('tile_rx', [-1, 1, 1]), "
    "('auto_unroll_max_step', 512), ('unroll_explicit', 1)],None,7166780",
    "[('tile_f', [-1, 2, 16, 8]), ('tile_y', [-1, 7, 1, 1]), ('tile_x', [-1, 1, 1, 1]), "
    "('tile_rc', [-1, 16, 1]), ('tile_ry', [-1, 1, 1]), ('tile_rx', [-1, 1, 1]), "
    "('auto_unroll_max_step', 1500), ('unroll_explicit', 1)],None,8726459",
    "[('tile_f', [-1, 4, 4, 32]), ('tile_y', [-1, 1, 1, 7]), ('tile_x', [-1, 1, 1, 7]), "
    "('tile_rc', [-1, 1, 1]), ('tile_ry', [-1, 1, 3]), ('tile_rx', [-1, 1, 3]), "
    "('auto_unroll_max_step', 0), ('unroll_explicit', 0)],None,1552296",
]


@pytest.fixture(scope="module")
def conv_task():
    return autotvm.task.create("test/conv2d_no_batching", args=SEED_ARGS, target="cuda")


@pytest.fixture(scope="module")
def matmul_task():
    return autotvm.task.create("test/matmul", args=(64, 32, 64), target="cuda")


# -- spaces -------------------------------------------------------------------------------------


def test_seed_layer_space_prints_as_in_the_tutorial(conv_task):
    assert repr(conv_task.config_space) == TUTORIAL_SPACE
    assert len(conv_task.config_space) == 10454400
    assert str(conv_task.config_space) == TUTORIAL_SPACE


def test_config_indices_mean_what_they_mean_in_tvm(conv_task):
    for text in TUTORIAL_CONFIGS:
        index = int(text.rsplit(",", 1)[1])
        cfg = conv_task.config_space.get(index)
        assert str(cfg) == text
        assert conv_task.config_space.index_of(cfg._entity_map) == index
        assert conv_task.config_space.knob2point(conv_task.config_space.point2knob(index)) == (
            index)


def test_template_matches_the_fixed_knob_schedule(conv_task):
    rng = np.random.default_rng(3)
    for index in [8726459] + [int(i) for i in rng.integers(0, 10454400, 4)]:
        cfg = conv_task.config_space.get(index)
        values = {k: (v.size if hasattr(v, "size") else v.val)
                  for k, v in cfg._entity_map.items()}
        s, _ = workloads.conv2d_no_batching_schedule(SEED_ARGS, cfg=values)
        assert conv_task.pipeline(cfg) == s.pipeline


COUNTED_CALLS = []


@autotvm.template("test/counted_matmul")
def counted_matmul(N, L, M):
    """``test/matmul`` that counts its instantiations."""
    COUNTED_CALLS.append(1)
    return matmul.func(N, L, M)


def test_a_candidate_is_instantiated_once_and_built_from_its_ir():
    from ptxforge.measure import MeasureInput as RawInput
    from ptxforge.measure.build import BuildOptions, build_candidate

    task = autotvm.task.create("test/counted_matmul", args=(64, 32, 64), target="cuda")
    cfg = task.config_space.get(5)
    COUNTED_CALLS.clear()
    inp = task.measure_input(cfg).to_measure()
    assert len(COUNTED_CALLS) == 1 and inp.scheduled_text
    opts = BuildOptions(compile_to="ir")
    built = build_candidate(inp, opts)
    assert len(COUNTED_CALLS) == 1 and built.error_no == 0
    assert "apply" not in built.stage_seconds
    # the same IR as applying the recorded pipeline, which is what a record replays
    replayed = build_candidate(RawInput(inp.task, inp.pipeline_text, inp.payload), opts)
    assert replayed.stage_seconds["apply"] >= 0
    assert built.artifact.device_ir == replayed.artifact.device_ir
    assert inp == RawInput(inp.task, inp.pipeline_text, inp.payload)


@pytest.mark.parametrize("policy, n, outputs", [
    ("factors", 512, 4), ("factors", 7, 4), ("power2", 100, 3), ("verbose", 24, 2)])
def test_split_policies(policy, n, outputs):
    space = SplitSpace([n], policy, num_outputs=outputs)
    sizes = [e.size for e in space.entities]
    assert len({tuple(s) for s in sizes}) == len(sizes)
    assert all(s[0] == -1 and len(s) == outputs for s in sizes)
    inner = [math.prod(s[1:]) for s in sizes]
    if policy == "factors":
        assert all(n % p == 0 for p in inner)
        # every ordered factorization of n into `outputs` parts, once
        assert len(sizes) == _ordered_factorizations(n, outputs - 1)
    if policy == "power2":
        assert all(p <= n and all(x & (x - 1) == 0 for x in s[1:]) for s, p in zip(sizes, inner))
        assert any(n % p for p in inner)  # tails allowed
    if policy == "verbose":
        assert {x for s in sizes for x in s[1:]} == set(get_factors(n)) | {16}
    assert repr(space) == (f"Split(policy={policy}, product={n}, num_outputs={outputs}) "
                           f"len={len(space)}")


def _ordered_factorizations(n: int, parts: int) -> int:
    if parts == 0:
        return 1
    return sum(_ordered_factorizations(n // d, parts - 1) for d in get_factors(n))


def test_knob_reorder_and_annotate_spaces():
    cfg = ConfigSpace()
    s_axes = ["a", "b", "c"]
    cfg.define_knob("unroll", [0, 512, 1500])
    cfg.define_reorder("order", s_axes, "all")
    cfg.define_annotate("ann", s_axes, "try_unroll")
    cfg.define_annotate("vec", s_axes, "try_unroll_vec")
    cfg.define_split("cand", 64, policy="candidate", num_outputs=2,
                     candidate=[[-1, 4], [-1, 16]])
    assert cfg.dims == [3, 6, 8, 12, 2]
    assert len(cfg) == 3 * 6 * 8 * 12 * 2
    text = repr(cfg)
    assert "1 order: Reorder(policy=all) len=6" in text
    assert "3 vec: Annotate(policy=try_unroll_vec) len=12" in text
    assert "0 unroll: OtherOption([0, 512, 1500]) len=3" in text
    with pytest.raises(ValueError, match="defined twice"):
        cfg.define_knob("unroll", [1])
    cfg2 = cfg.get(len(cfg) - 1)
    assert cfg2["unroll"].val == 1500 and cfg2["order"].perm == [2, 1, 0]
    assert cfg2["vec"].anns == ["unroll", "unroll", "vec"]


def test_reorder_and_annotate_entities_apply_to_schedules():
    A = te.placeholder((64, 64), name="A")
    B = te.compute((64, 64), lambda i, j: A[i, j] + 1.0, name="B")
    s = te.create_schedule(B.op)
    i, j = s[B].op.axis
    cfg = ConfigSpace()
    cfg.define_reorder("r", [i, j], "all")
    cfg.define_annotate("a", [i, j], "bind_gpu")
    entity = cfg.get(1)
    entity["r"].apply(s, B, [i, j])
    entity["a"].apply(s, B, [i, j])
    text = str(s.pipeline)
    assert "reorder([B.j, B.i])" in text
    assert 'bind(B.i, "blockIdx.x")' in text and 'bind(B.j, "threadIdx.x")' in text


def test_config_entity_json_round_trip(conv_task):
    cfg = conv_task.config_space.get(8726459)
    back = ConfigEntity.from_json_dict(cfg.to_json_dict())
    assert back == cfg and str(back) == str(cfg)
    assert back.get_other_option() == {"auto_unroll_max_step": 1500, "unroll_explicit": 1}
    feat = cfg.get_flatten_feature()
    assert feat[:4].tolist() == [2, 2, 16, 8]  # the -1 resolved against 512


def test_task_knows_its_workload_and_work(conv_task):
    assert conv_task.workload == ("test/conv2d_no_batching",) + SEED_ARGS
    assert conv_task.flop >= 2 * 512 * 512 * 9 * 49
    assert conv_task.spec.workload_key == autotvm.workload_key(conv_task.workload)
    assert re.match(r"Task\(func_name=test/conv2d_no_batching, args=\(1, 7", repr(conv_task))
    with pytest.raises(KeyError, match="no template named"):
        autotvm.task.create("test/nope", args=(1,))


# -- tuners ---------------------------------------------------------------------------------------


def _synthetic_cost(cfg) -> float:
    """A smooth objective over the big space with one optimum."""
    goal = {"a": (3, 4), "b": (1, 6), "c": (5, 2)}
    err = 0.0
    for name, (g1, g2) in goal.items():
        s = cfg[name].size
        err += (math.log2(s[1]) - g1) ** 2 + (math.log2(s[2]) - g2) ** 2
    err += (cfg["k"].val - 5) ** 2 / 4
    return 1e-3 * (1.0 + err)


def _drive(tuner, n_trial: int, batch: int = 16, cost=None) -> list:
    """Run a tuner's propose/update loop on a synthetic objective; the indices proposed."""
    cost = cost or _synthetic_cost
    seen = []
    while len(seen) < n_trial and tuner.has_next():
        configs = tuner.next_batch(min(batch, n_trial - len(seen)))
        assert configs
        inputs = [autotvm.MeasureInput("cuda", tuner.task, c) for c in configs]
        results = [MeasureResult((cost(c),), 0, "", 0.0, 0.0) for c in configs]
        for inp, res in zip(inputs, results):
            flops = inp.task.flop / res.mean
            if flops > tuner.best_flops:
                tuner.best_flops, tuner.best_config = flops, inp.config
        tuner.update(inputs, results)
        seen += [c.index for c in configs]
    return seen


@pytest.fixture(scope="module")
def big_task():
    return autotvm.task.create("test/big_space", args=(256,))


FAST_SA = {"n_iter": 120, "early_stop": 30, "parallel_size": 64}


@pytest.mark.parametrize("make", [
    lambda t: RandomTuner(t, seed=1),
    lambda t: GridSearchTuner(t),
    lambda t: GATuner(t, pop_size=20, seed=1),
    lambda t: XGBTuner(t, plan_size=16, seed=1, sa_options=FAST_SA),
    lambda t: XGBTuner(t, plan_size=16, seed=1, loss_type="reg", diversity_filter_ratio=2,
                       sa_options=FAST_SA),
])
def test_tuners_propose_valid_distinct_configs(big_task, make):
    tuner = make(big_task)
    seen = _drive(tuner, 72)
    assert len(seen) == 72 and len(set(seen)) == 72
    assert all(0 <= i < len(big_task.config_space) for i in seen)


def test_tuners_exhaust_a_small_space_without_repeats(matmul_task):
    n = len(matmul_task.config_space)
    for tuner in (RandomTuner(matmul_task, seed=0), GATuner(matmul_task, pop_size=8, seed=0),
                  XGBTuner(matmul_task, plan_size=8, seed=0, sa_options=FAST_SA)):
        seen = _drive(tuner, n + 10, batch=8, cost=lambda c: 1e-3 * c["tile_x"].size[1])
        assert sorted(seen) == list(range(n)), type(tuner).__name__
        assert not tuner.has_next()


def test_xgb_tuner_beats_random_search_on_a_synthetic_objective(big_task):
    def best(tuner):
        _drive(tuner, 128)
        return _synthetic_cost(tuner.best_config)

    xgb = [best(XGBTuner(big_task, plan_size=32, seed=s, sa_options=FAST_SA)) for s in range(3)]
    rnd = [best(RandomTuner(big_task, seed=s)) for s in range(3)]
    assert np.mean(xgb) < np.mean(rnd)
    assert min(xgb) <= min(rnd)


def test_submodular_pick_prefers_new_knob_values():
    knobs = [[0, 0], [0, 1], [1, 1], [2, 2]]
    picked = submodular_pick(np.zeros(4), knobs, 2)
    assert picked == [0, 2]  # the second pick shares no value with the first


def test_lowered_features_describe_the_loop_structure(matmul_task):
    space = matmul_task.config_space
    good = [i for i in range(len(space)) if math.prod(
        space.get(i)["tile_y"].size[1:] + space.get(i)["tile_x"].size[1:]) <= 256][:3]
    bad = next(i for i in range(len(space)) if math.prod(
        space.get(i)["tile_y"].size[1:] + space.get(i)["tile_x"].size[1:]) > 1024)
    for kind, width in (("itervar", ITERVAR_WIDTH), ("curve", CURVE_WIDTH)):
        cache = FeatureCache(matmul_task, kind, n_parallel=0)
        feats, valid = cache.get(good + [bad])
        assert feats.shape == (4, width)
        assert valid.tolist() == [True, True, True, False]
        assert not np.array_equal(feats[0], feats[1])
        assert not feats[3].any()


def test_xgb_tuner_with_loop_features_avoids_invalid_configs(matmul_task):
    tuner = XGBTuner(matmul_task, plan_size=8, feature_type="itervar", seed=0,
                     sa_options={"n_iter": 30, "early_stop": 10, "parallel_size": 16})
    tuner.cost_model.features.n_parallel = 2

    def threads(cfg):
        return math.prod(cfg["tile_y"].size[1:] + cfg["tile_x"].size[1:])

    inputs = [autotvm.MeasureInput("cuda", matmul_task, c) for c in tuner.next_batch(8)]
    results = [MeasureResult((1e-3 * threads(i.config),), 0, "", 0.0, 0.0)
               if threads(i.config) <= 1024 else MeasureResult((1e10,), 1, "x", 0.0, 0.0)
               for i in inputs]
    try:
        tuner.update(inputs, results)
        planned = [matmul_task.config_space.get(i) for i in tuner.trials]
    finally:
        tuner.cost_model.close()
    assert planned and all(threads(c) <= 1024 for c in planned)


# -- tuning end to end, records and dispatch ----------------------------------------------------


def test_tune_records_errors_and_goes_on(matmul_task, tmp_path):
    log = tmp_path / "mm.log"
    option = autotvm.measure_option(builder=LocalBuilder(n_parallel=2, compile_to="ir"),
                                    runner=autotvm.SimRunner(max_sim_seconds=1.0))
    tuner = GridSearchTuner(matmul_task)
    n = len(matmul_task.config_space)
    bar = io.StringIO()
    tuner.tune(n_trial=n, measure_option=option,
               callbacks=[autotvm.callback.log_to_file(log),
                          autotvm.callback.progress_bar(n, stream=bar)])
    assert f"GFLOPS (estimated) | Progress: ({n}/{n})" in bar.getvalue()
    records = load_records(log)
    assert len(records) == len(matmul_task.config_space)
    codes = [r.error_no for _, r in records]
    # tiles of more than 1024 threads cannot launch: recorded, and tuning went on past them
    assert MeasureErrorNo.INSTANTIATION_ERROR in codes and codes.count(0) >= 10
    for inp, res in records:
        cfg = ConfigEntity.from_json_dict(inp.payload["autotvm"]["config"])
        big = math.prod(cfg["tile_y"].size[1:] + cfg["tile_x"].size[1:]) > 1024
        assert (res.error_no == MeasureErrorNo.INSTANTIATION_ERROR) == big
        assert res.error_no or (res.estimated and res.correctness == "passed")
    assert tuner.best_config is not None and tuner.best_flops > 0

    best = autotvm.apply_history_best(str(log))
    cfg = best.query("cuda", matmul_task.workload)
    assert cfg == tuner.best_config
    with autotvm.apply_history_best(str(log)):
        s, _ = matmul(64, 32, 64)
    assert s.pipeline == matmul_task.pipeline(tuner.best_config)


def test_apply_history_best_falls_back_with_a_warning(tmp_path):
    empty = tmp_path / "empty.log"
    empty.write_text("")
    with autotvm.apply_history_best(str(empty)) as ctx:
        with pytest.warns(RuntimeWarning, match="Cannot find a tuned config"):
            s, _ = matmul(32, 16, 48)
        cfg = ctx.query("cuda", ("test/matmul", 32, 16, 48))
    assert cfg.is_fallback
    assert str(cfg).startswith("[('tile_y', [-1, 1]), ('tile_x', [-1, 1])")
    assert 'bind(C.i.inner, "threadIdx.y")' in str(s.pipeline)


def test_template_outside_any_context_uses_the_fallback():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s, tensors = matmul(16, 16, 16)
    assert len(tensors) == 3 and "split" in str(s.pipeline)


def test_transfer_learning_plans_from_history(matmul_task, tmp_path):
    records = []
    space = matmul_task.config_space
    # half the space: the logged configs are visited (resume), the plan covers the rest
    for i in range(0, len(space), 2):
        cfg = space.get(i)
        threads = math.prod(cfg["tile_y"].size[1:] + cfg["tile_x"].size[1:])
        ok = threads <= 1024
        records.append((autotvm.MeasureInput("cuda", matmul_task, cfg),
                        MeasureResult((1.0 / threads,) if ok else (1e10,), 0 if ok else 1, "",
                                      0.0, 0.0)))
    tuner = XGBTuner(matmul_task, plan_size=4, seed=0, sa_options=FAST_SA)
    tuner.load_history(records, min_seed_records=10)
    assert tuner.cost_model.base_model is not None
    planned = [space.get(i) for i in tuner.trials]
    assert planned and not set(tuner.trials) & tuner.visited
    # the history says more threads is faster: the plan starts with big tiles
    assert np.mean([math.prod(c["tile_y"].size[1:] + c["tile_x"].size[1:])
                    for c in planned]) >= 256

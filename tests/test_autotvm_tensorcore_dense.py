"""The AutoTVM templates ``dense_tensorcore.cuda`` and ``batch_matmul_tensorcore.cuda``:
their config spaces, illegal knobs rejected with the rule, the default configuration
without a record, a short tuning on the simulator runner whose best record dispatches
through ``apply_history_best``, and the dispatched kernels (tensor-core mma in their device
IR) against numpy float64."""

from __future__ import annotations

import numpy as np
import pytest

import ptxforge
from ptxforge import autotvm
from ptxforge.autotvm import tensorcore_dense as template
from ptxforge.autotvm.space import InstantiationError
from ptxforge.autotvm.tuner import GridSearchTuner, RandomTuner
from ptxforge.ir import dtype as dt
from ptxforge.ir.intrin import ANNOTATION
from ptxforge.ir.stmt import For, walk
from ptxforge.measure import LocalBuilder, load_records
from ptxforge.ops.schedules import default_schedule
from ptxforge.ops.schedules.gemm.chooser import choose_gemm_config
from ptxforge.ops.schedules.gemm.forms import gemm_form
from ptxforge.target import as_target

SM80 = "cuda -arch=sm_80"
RNG = np.random.default_rng(21)
TOL = {"float16": 2e-3, "bfloat16": 1.6e-2, "float32": 1e-5}
KNOBS = ["block_m", "block_n", "block_k", "warps_m", "warps_n", "stages", "vec", "layout",
         "split_k"]


def intrins(device_module) -> set:
    """The tensor intrinsics of a lowered module's kernels."""
    return {s.annotations[ANNOTATION] for k in device_module.kernels() for s in walk(k.body)
            if isinstance(s, For) and ANNOTATION in s.annotations}


def host(shape, dtype):
    x = RNG.uniform(-1, 1, shape).astype(np.float32)
    return dt.to_bfloat16(x) if dtype == "bfloat16" else x.astype(dtype)


def f64(a, dtype):
    return (dt.from_bfloat16(a) if dtype == "bfloat16" else a).astype(np.float64)


def run(s, tensors):
    """Build ``s`` for the simulator and run it on random inputs: (module, inputs as
    float64, output as float64)."""
    mod = ptxforge.build(s, tensors, target="sim")
    *ins, out_t = tensors
    arrays = [host(t.shape, t.dtype) for t in ins]
    out = np.full(out_t.shape, np.nan,
                  dt.BFLOAT16_HOST if out_t.dtype == "bfloat16" else out_t.dtype)
    mod(*arrays, out)
    return mod, [f64(a, t.dtype) for a, t in zip(arrays, ins)], f64(out, out_t.dtype)


def rel(got, want) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


def tune(task, log, n_trial, tuner_cls=RandomTuner, **kw):
    option = autotvm.measure_option(builder=LocalBuilder(n_parallel=2, compile_to="ir"),
                                    runner=autotvm.SimRunner(max_sim_seconds=2.0))
    tuner = tuner_cls(task, **kw)
    tuner.tune(n_trial=n_trial, measure_option=option,
               callbacks=[autotvm.callback.log_to_file(log)])
    return tuner


def test_dense_space_and_illegal_knobs_name_the_rule():
    task = autotvm.task.create(template.NAME, args=(64, 64, 64, "float16"), target=SM80)
    space = task.config_space
    assert list(space.space_map) == KNOBS
    # block tiles up to the extents (64), block_k 16..64, warps 1..4 each, 4 depths,
    # three copy widths, two shared layouts, split-K in 1, 2 or 4 parts (K = 64)
    assert space.dims == [3, 3, 3, 3, 3, 4, 3, 2, 3] and len(space) == 17496
    assert task.flop == 2 * 64 ** 3
    cases = [
        # block_m 16 over 2 warps: warp tiles of 8 rows are no m16n8 fragments
        ([0, 0, 0, 1, 0, 0, 0, 0, 0], "warp tile's rows .* a multiple of 16"),
        # block_k 64 over K = 64 is one step: no room for 2 pipeline stages
        ([2, 2, 2, 1, 1, 1, 0, 0, 0], "at least 2 block_k steps"),
        # a 16x16x16 tile has 256 elements, fewer than 64 threads x 8
        ([0, 0, 0, 0, 1, 0, 0, 0, 0], "threads x vec .* divide a shared tile"),
        # block_k 32 in 2 split-K parts of K = 64: one step each, 2 stages need two
        ([0, 0, 1, 0, 0, 1, 0, 0, 1], "at least 2 block_k steps .* per split_k part"),
    ]
    for knobs, rule in cases:
        with pytest.raises(InstantiationError, match=rule):
            task.instantiate(space.get(space.knob2point(knobs)))
    # a legal point instantiates: 64x64 tiles of 2x2 warps, 2 stages of 32, unpadded rows
    s, _ = task.instantiate(space.get(space.knob2point([2, 2, 1, 1, 1, 1, 0, 1, 0])))
    text = str(s.pipeline)
    assert "software_pipeline(" in text and "storage_align(data.shared" not in text


@pytest.mark.parametrize("name,args", [
    (template.NAME, (32, 32, 128, "float16")),
    (template.BATCH_NAME, (2, 16, 32, 128, "bfloat16")),
], ids=["dense", "batch_matmul"])
def test_split_k_knob_runs_the_parts_on_blockidx_z(name, args):
    task = autotvm.task.create(name, args=args, target=SM80)
    space = task.config_space
    assert [e.val for e in space.space_map["split_k"].entities] == [1, 2, 4, 8]
    # 16x32 tiles of 1x2 warps, block_k 32, 2 stages, vec 8, padded rows, 2 parts
    with as_target(SM80):
        s, tensors = task.instantiate(space.get(space.knob2point([0, 1, 1, 0, 1, 1, 0, 0, 1])))
    assert "rfactor" in str(s.pipeline)
    mod, (a, b), got = run(s, tensors)
    batch = args[0] if name == template.BATCH_NAME else 1
    product, total = mod.device_module.kernels()
    assert tuple(product.attrs.launch.grid)[2] == 2 * batch
    want = a @ (b.transpose(0, 2, 1) if batch > 1 else b.T)
    assert rel(got, want) < TOL[args[-1]]


def test_a_split_k_default_is_a_point_of_the_space():
    # BERT-base's FFN2 at batch 1: the default splits K, and the tuners can measure it
    with as_target(SM80):
        task = autotvm.task.create(template.NAME, args=(128, 768, 3072, "float16"),
                                   target=SM80)
        default = task.default_config()
    want = choose_gemm_config(gemm_form(template.dense_declaration(
        128, 768, 3072)[3], SM80), SM80)
    assert want.split_k > 1
    assert default is not None and default["split_k"].val == want.split_k
    assert template.knob_values(want) == {k: default[k].val for k in KNOBS}


def test_templates_refuse_products_the_tensor_cores_do_not_run():
    with pytest.raises(Exception, match="not a product the tensor cores"):
        autotvm.task.create(template.NAME, args=(64, 8, 64, "float16"), target=SM80)
    with pytest.raises(Exception, match="not a product the tensor cores"):
        autotvm.task.create(template.BATCH_NAME, args=(2, 32, 8, 64, "float16"),
                            target=SM80)


def test_without_a_record_the_default_configuration_is_used():
    args = (49, 40, 72, "float16")
    with as_target(SM80), pytest.warns(RuntimeWarning, match="fallback configuration"):
        s, tensors = template.dense_tensorcore(*args)
        _, _, out, mm = template.dense_declaration(*args)
        want = choose_gemm_config(gemm_form(mm, SM80), SM80)
        assert str(s.pipeline) == str(default_schedule(out, SM80).pipeline)
    assert f"pad_m={want.block_m}, pad_n={want.block_n}" in str(s.pipeline)


@pytest.mark.parametrize("args", [
    (64, 64, 64, "float16"),
    (49, 40, 72, "bfloat16"),            # padded on every side
])
def test_dense_tunes_on_the_simulator_and_dispatches_the_best(tmp_path, args):
    task = autotvm.task.create(template.NAME, args=args, target=SM80)
    log = str(tmp_path / "dense.log")
    tuner = tune(task, log, 6, seed=5)
    records = load_records(log)
    ok = [r.correctness for _, r in records if r.error_no == 0]
    assert len(records) == 6 and "passed" in ok
    assert all(c == "passed" or c.startswith("skipped") for c in ok)  # none failed
    with autotvm.apply_history_best(log):
        with as_target(SM80):
            s, tensors = template.dense_tensorcore(*args)
    assert s.pipeline == task.pipeline(tuner.best_config)
    mod, (a, b), got = run(s, tensors)
    assert any(i.startswith("mma_m16n8k16_") for i in intrins(mod.device_module))
    assert rel(got, a @ b.T) < TOL[args[3]]


def test_tf32_float32_output_and_grid_search(tmp_path):
    # float32 inputs: TF32 products, asked for by the template's name
    args = (32, 32, 32, "float32")
    task = autotvm.task.create(template.NAME, args=args, target=SM80)
    assert [e.val for e in task.config_space.space_map["vec"].entities] == [4, 2, 1]
    log = str(tmp_path / "tf32.log")
    tune(task, log, 4, GridSearchTuner)
    assert any(r.error_no == 0 and r.correctness == "passed" for _, r in load_records(log))
    with autotvm.apply_history_best(log), as_target(SM80):
        s, tensors = template.dense_tensorcore(*args)
    mod, (a, b), got = run(s, tensors)
    assert {"mma_m16n8k8_tf32_f32", "ldmatrix_a_x4_tf32"} <= intrins(mod.device_module)
    want = dt.round_to(a, "tf32") @ dt.round_to(b, "tf32").T
    assert rel(got, want) < TOL["float32"]
    # float16 inputs with the float32 sums as the output: no cast stage
    with as_target(SM80), pytest.warns(RuntimeWarning, match="fallback configuration"):
        s, tensors = template.dense_tensorcore(32, 48, 64, "float16", "float32")
    assert tensors[-1].dtype == "float32"
    mod, (a, b), got = run(s, tensors)
    assert rel(got, a @ b.T) < 1e-6


def test_batch_matmul_template_tunes_and_dispatches(tmp_path):
    args = (2, 49, 40, 72, "float16")  # every extent padded, per batch
    task = autotvm.task.create(template.BATCH_NAME, args=args, target=SM80)
    space = task.config_space
    assert list(space.space_map) == KNOBS and task.flop == 2 * 2 * 49 * 40 * 72
    assert space.dims[:3] == [3, 3, 3]  # block_m, block_n <= 64
    bad = space.get(space.knob2point([0, 0, 0, 0, 2, 0, 0, 0, 0]))
    with pytest.raises(InstantiationError, match="warp tile's columns .* multiple of 8"):
        task.instantiate(bad)  # 16 columns over 4 warps
    log = str(tmp_path / "bmm.log")
    tune(task, log, 6, seed=2)
    assert any(r.error_no == 0 and r.correctness == "passed" for _, r in load_records(log))
    with autotvm.apply_history_best(log), as_target(SM80):
        s, tensors = template.batch_matmul_tensorcore(*args)
    assert "implicit_gemm" in str(s.pipeline)
    mod, (x, y), got = run(s, tensors)
    assert any(i.startswith("mma_m16n8k16_") for i in intrins(mod.device_module))
    assert rel(got, x @ y.transpose(0, 2, 1)) < TOL["float16"]


@pytest.mark.parametrize("tuner_cls", [RandomTuner, GridSearchTuner])
def test_tuners_measure_the_default_configuration_first(tmp_path, tuner_cls):
    """A template that declares its untuned configuration has it measured first, once, so
    a tuned record is never one the untuned template beats."""
    from ptxforge.autotvm import tensorcore_conv

    for name, args in ((template.NAME, (64, 48, 64, "float16")),
                       (tensorcore_conv.NAME, (1, 7, 7, 16, 32, 3, 3, 1, 1, "float16"))):
        with as_target(SM80):
            task = autotvm.task.create(name, args=args, target=SM80)
            default = task.default_config()
        assert default is not None
        log = str(tmp_path / f"{tuner_cls.__name__}_{name}.log")
        tuner = tuner_cls(task)
        with as_target(SM80):
            tuner.tune(n_trial=3, measure_option=autotvm.measure_option(
                builder=LocalBuilder(n_parallel=1, compile_to="ir"),
                runner=autotvm.SimRunner(max_sim_seconds=2.0)),
                callbacks=[autotvm.callback.log_to_file(log)])
        indices = [inp.payload["autotvm"]["config"]["index"] for inp, _ in load_records(log)]
        assert indices[0] == default.index and indices.count(default.index) == 1
        assert len(indices) == 3

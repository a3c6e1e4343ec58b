"""The GPU target: parsing, architecture facts, limits and the current-target stack."""

import pickle
from pathlib import Path

import numpy as np
import pytest

from ptxforge.target import Target, TargetError, as_target, current_target


def test_sm80_limits_and_features():
    t = Target("cuda -arch=sm_80")
    assert t.kind.name == "cuda"
    assert t.arch == "sm_80"
    assert t.max_threads_per_block == 1024
    assert t.max_shared_memory_per_block == 48 * 1024
    assert t.max_shared_memory_per_block_optin == 163 * 1024
    assert t.has_cp_async and t.has_ldmatrix and not t.has_wgmma
    assert t.has_mma("m16n8k16", "float16") and t.has_mma("m16n8k8", "tf32")
    assert "wgmma" not in t.features


def test_sm90a_has_wgmma_and_tensor_core_peak_exceeds_cuda_core_peak():
    t = Target("cuda -arch=sm_90a")
    assert t.has_wgmma and t.has_tma
    assert t.peak_flops("float16", tensor_core=True) > 10 * t.peak_flops("float32")
    assert Target("cuda -arch=sm_80").peak_flops("float16", True) < t.peak_flops("float16", True)


def test_options_override_figures():
    t = Target("cuda -arch=sm_86 -max_threads_per_block=512 -num_sms=84")
    assert (t.max_threads_per_block, t.num_sms, t.arch) == (512, 84, "sm_86")
    assert str(t) == "cuda -arch=sm_86 -max_threads_per_block=512 -num_sms=84"


@pytest.mark.parametrize("spec, words", [
    ("cuda -arch=sm_70", "unknown architecture"),
    ("opencl", "unknown target kind"),
    ("", "empty target"),
    ("cuda arch", "-key=value"),
    ("cuda -num_sms=abc", "not a number"),
])
def test_bad_strings_are_clear(spec, words):
    with pytest.raises(TargetError, match=words):
        Target(spec)


def test_with_block_sets_the_current_target():
    base = current_target()
    with Target("cuda -arch=sm_80") as t:
        assert current_target() is t
        assert Target.current() is t
        with as_target("cuda -arch=sm_89"):
            assert current_target().arch == "sm_89"
        assert current_target() is t
    assert current_target() == base


def test_pickles_and_compares_by_value():
    t = Target("cuda -arch=sm_90a")
    assert pickle.loads(pickle.dumps(t)) == t
    assert as_target("cuda -arch=sm_90a") == t
    assert t.with_arch("sm_80").arch == "sm_80"
    assert {t: 1}[Target("cuda -arch=sm_90a")] == 1 and len({t, as_target(t.spec)}) == 1


def test_model_figures_are_per_architecture():
    a100, h100 = Target("cuda -arch=sm_80"), Target("cuda -arch=sm_90")
    assert (a100.fp32_lanes_per_sm, h100.fp32_lanes_per_sm) == (64, 128)
    assert a100.peak_flops("float32") == h100.peak_flops("float32") / 2
    assert h100.schedulers_per_sm == 4 and h100.warps_to_hide_latency == 8
    assert h100.l2_bytes_per_clock == h100.l2_bytes_per_s / h100.clock_hz
    assert "sm_80" in a100.label and "A100" in a100.label


def test_hardware_params_are_derived_from_a_target():
    from ptxforge.autosched import HardwareParams

    hw = HardwareParams.from_target("cuda -arch=sm_80 -num_sms=108")
    t = Target("cuda -arch=sm_80 -num_sms=108")
    assert hw.num_sms == 108 and hw.max_threads_per_block == 1024
    assert hw.max_shared_memory_per_sm == t.shared_memory_per_sm == 164 * 1024
    assert hw.fma_per_sm_per_clock == 64 and hw.clock_hz == t.clock_hz
    assert hw.global_latency_cycles == t.global_latency_cycles
    with Target("cuda -arch=sm_86 -num_sms=84"):
        assert HardwareParams().num_sms == 84
        assert HardwareParams(num_sms=10).num_sms == 10
    assert HardwareParams.from_target(t, max_vthread_extent=4).max_vthread_extent == 4
    with pytest.raises(TypeError, match="no figure num_cores"):
        HardwareParams.from_target(t, num_cores=4)


def test_estimator_rejects_on_sm80_what_sm90_allows():
    import dataclasses

    from ptxforge.measure import estimate
    from ptxforge.measure.kernel_stats import KernelStats

    st = KernelStats("k", (132, 1, 1), (128, 1, 1), 48 * 1024, 0, 1.0, 1.0, 4.0, 4.0, 4.0,
                     0.0, 0.0, 1024, 10.0)
    for shared in (164 * 1024, 200 * 1024):  # above sm_80's opt-in (163 KiB), below 227 KiB
        big = dataclasses.replace(st, shared_bytes=shared)
        assert estimate.blocks_per_sm(big, 32, "cuda -arch=sm_90") == 1
        assert estimate.kernel_seconds(big, 32, "cuda -arch=sm_80") == float("inf")
        assert estimate.module_seconds((big,), None, Target("cuda -arch=sm_90")) < 1e-3
    # fewer SMs and half the float32 lanes: the same kernel takes longer on an A100 model
    busy = dataclasses.replace(st, grid=(4096, 1, 1), flops=4096.0)
    assert estimate.kernel_seconds(busy, 32, "cuda -arch=sm_80 -num_sms=108") > \
        estimate.kernel_seconds(busy, 32, "cuda -arch=sm_90")
    with Target("cuda -arch=sm_80"):
        assert estimate.kernel_seconds(dataclasses.replace(st, shared_bytes=200 * 1024)) == \
            float("inf")


def test_sim_runner_models_its_target():
    from ptxforge.measure import SimRunner

    assert SimRunner(target="cuda -arch=sm_80").device == "sm_80 model (estimated)"
    assert SimRunner().target == Target("cuda")


def test_default_schedules_take_a_target():
    import ptxforge
    from ptxforge import workloads
    from ptxforge.ops.schedules import choose_tiling, default_schedule

    data, kernel, bias, out = workloads.conv2d_layer(*workloads.SEED_ARGS)
    for spec in ("cuda -arch=sm_80", Target("cuda -arch=sm_90a")):
        module = ptxforge.lower(default_schedule(out, target=spec), [data, kernel, bias, out])
        (k,) = module.kernels()
        assert int(np.prod(k.launch.block)) <= 1024
        assert k.shared_bytes <= 48 * 1024
    conv = out.op.input_tensors[0].op
    while not conv.reduce_axis:
        conv = conv.input_tensors[0].op
    few = choose_tiling(conv, "cuda -arch=sm_80 -max_threads_per_block=64")
    assert int(np.prod(few.threads)) <= 64
    with pytest.raises(TargetError, match="unknown architecture"):
        default_schedule(out, target="cuda -arch=sm_61")


def test_no_second_gpu_description_remains():
    root = Path(ptxforge_root())
    needle = "class " + "GPUSpec"  # split so that grep finds no such line here either
    offenders = [str(p.relative_to(root)) for p in root.rglob("*.py")
                 if needle in p.read_text(encoding="utf-8")]
    assert offenders == []


def ptxforge_root() -> str:
    import ptxforge

    return str(Path(ptxforge.__file__).parent)


def test_occupancy_is_the_targets():
    h100, a100 = Target("cuda -arch=sm_90"), Target("cuda -arch=sm_80")
    assert h100.blocks_per_sm(128, 32, 0) == 16  # 2048 threads per SM
    assert h100.blocks_per_sm(128, 255, 1024) == 2  # 256 registers x 128 threads: half an SM
    assert h100.blocks_per_sm(1024, 32, 100 * 1024) == 2  # 228 KiB of shared memory
    assert a100.blocks_per_sm(1024, 32, 100 * 1024) == 1  # 164 KiB
    assert a100.blocks_per_sm(128, 32, 200 * 1024) == 0 < h100.blocks_per_sm(128, 32, 200 * 1024)
    assert h100.blocks_per_sm(2048, 32, 0) == 0 and h100.blocks_per_sm(32, 256, 0) == 0
    many = h100.blocks_per_sm(np.array([64, 256, 2048]), np.array([40, 64, 32]), 4096)
    # 40 registers x 64 threads: 25 blocks fill the register file
    assert many.tolist() == [25, 4, 0]

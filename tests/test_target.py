"""The GPU target: parsing, architecture facts, limits and the current-target stack."""

import pickle

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

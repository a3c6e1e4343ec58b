"""The fp8 formats (float8_e4m3fn, float8_e5m2): conversion as cvt.rn.satfinite does it,
exact decoding, per-tensor scaling, and their place among the dtypes."""

from __future__ import annotations

import numpy as np
import pytest

from ptxforge.ir import dtype as dt
from ptxforge.ir.float8 import (
    FORMATS,
    Float8Error,
    float8_bits,
    float8_format,
    float8_from_bits,
    quantize,
    round_to_float8,
)

ml_dtypes = pytest.importorskip("ml_dtypes")
REF = {"float8_e4m3fn": ml_dtypes.float8_e4m3fn, "float8_e5m2": ml_dtypes.float8_e5m2}


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_decode_every_pattern(name):
    bits = np.arange(256, dtype=np.uint8)
    ref = bits.view(REF[name]).astype(np.float32)
    np.testing.assert_array_equal(float8_from_bits(bits, name), ref)


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_encode_every_finite_value_back_to_its_pattern(name):
    bits = np.arange(256, dtype=np.uint8)
    vals = float8_from_bits(bits, name)
    fin = np.isfinite(vals)
    np.testing.assert_array_equal(float8_bits(vals[fin], name), bits[fin])


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_round_to_nearest_even_in_range(name):
    f = float8_format(name)
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(50000) * np.exp(rng.uniform(-22, 13, 50000))).astype(np.float32)
    x = x[np.abs(x) <= f.max_finite]
    ours = float8_bits(x, name)
    ref = x.astype(REF[name]).view(np.uint8)
    np.testing.assert_array_equal(ours, ref)


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_ties_go_to_even(name):
    f = float8_format(name)
    one_ulp = 2.0 ** -f.man_bits
    # halfway between 1 and 1 + ulp rounds down to 1 (even mantissa 0); between 1 + ulp
    # and 1 + 2 ulp rounds up to 1 + 2 ulp
    got = round_to_float8([1 + one_ulp / 2, 1 + 1.5 * one_ulp, -(1 + one_ulp / 2)], name)
    np.testing.assert_array_equal(got, np.float32([1.0, 1 + 2 * one_ulp, -1.0]))
    # the smallest subnormal and half of it (a tie to zero)
    tiny = 2.0 ** (f.min_normal_exp - f.man_bits)
    np.testing.assert_array_equal(round_to_float8([tiny, tiny / 2, tiny * 0.51], name),
                                  np.float32([tiny, 0.0, tiny]))


@pytest.mark.parametrize("name,top", [("float8_e4m3fn", 448.0), ("float8_e5m2", 57344.0)])
def test_satfinite(name, top):
    x = np.array([top * 1.03, top * 4, 1e30, np.inf, -np.inf, -top * 9], np.float32)
    got = round_to_float8(x, name)
    np.testing.assert_array_equal(got, np.float32([top, top, top, top, -top, -top]))
    nan = float8_bits(np.float32([np.nan]), name)
    assert nan[0] == 0x7F and np.isnan(float8_from_bits(nan, name)[0])


def test_float64_is_rounded_once():
    # just above the tie between 1 and 1.125 (e4m3): float32 would round it to the tie
    x = np.float64(1.0625) + 2.0 ** -40
    assert round_to_float8(np.array([x]), "float8_e4m3fn")[0] == np.float32(1.125)


def test_quantize_per_tensor_scale():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((64, 32)).astype(np.float32) * 7
    for name in FORMATS:
        bits, scale = quantize(x, name)
        back = float8_from_bits(bits, name) * scale
        assert np.max(np.abs(float8_from_bits(bits, name))) == float8_format(name).max_finite
        f = float8_format(name)
        # half an ulp of a normal value, or half the smallest subnormal (times the scale)
        half_ulp = 2.0 ** -(f.man_bits + 1)
        tiny = 2.0 ** (f.min_normal_exp - f.man_bits) * scale
        assert np.all(np.abs(back - x) <= half_ulp * np.abs(x) + tiny / 2 + 1e-6)


def test_dtypes():
    for name in FORMATS:
        assert dt.check(name) == name
        assert dt.bits(name) == 8 and dt.nbytes(name) == 1
        assert dt.is_float(name)
        assert dt.to_numpy(name) == np.uint8
        np.testing.assert_array_equal(dt.round_to([3.3, 500.0], name),
                                      round_to_float8([3.3, 500.0], name))
    with pytest.raises(Float8Error, match="no 8-bit float"):
        float8_format("float8_e3m4")

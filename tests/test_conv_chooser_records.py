"""The conv defaults judged by the H200 tuning records of MobileNetV2 b1, ResNet-18 b16
and b1 and ResNet-50 b1 (``bench/results/conv_records_*_h200_2026-11-28.jsonl``, 1,000
trials each, fp16 NHWC), as ``bench/conv_defaults_h200.py`` prints them: calls x us of the
layers whose pick (or its twin) the records hold, against the records' fastest. Before the
small, long and short conv rules (``ops/schedules/gemm/conv_shapes.py``): 1.370 over 1 of
MobileNetV2's 20 layers, 1.204, 1.025 and 1.018; now 1.028, 1.071, 1.011 and 1.014."""

from __future__ import annotations

import os

import pytest

from .bench_scripts import load_bench

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")


def _bench():
    return load_bench("conv_defaults_h200")


BENCH_MOD = _bench()


@pytest.mark.parametrize("network,batch,judged,ratio,worst", [
    ("mobilenet_v2", 1, 14, 1.03, 1.24),   # worst: 3,136 x 144 x 24, 8 warps measured best
    # worst: the unsplit residual 3,136 x 256 x 2,304, left to the estimates (1.255)
    ("resnet_v1-18", 16, 13, 1.075, 1.26),
    ("resnet_v1-18", 1, 13, 1.015, 1.15),  # worst: 196 x 256 x 128 (1.98 us, best 1.73)
    ("resnet_v1-50", 1, 22, 1.015, 1.11),  # the residual rule's 49 x 2,048 x 512: 3 stages
])
def test_the_records_judge_the_defaults_close_to_their_best(network, batch, judged, ratio,
                                                            worst, capsys):
    records = BENCH_MOD.REPLAY.load(BENCH_MOD.results(
        f"conv_records_{network}_b{batch}_h200_2026-11-28.jsonl"))
    rows = BENCH_MOD.conv_rows(network, batch, records)
    out = BENCH_MOD.summary(rows)
    assert out["judged"] >= judged
    assert out["default_us"] <= ratio * out["best_us"]
    assert max(r[4] / r[7] for r in rows if r[4] == r[4]) <= worst
    assert "judged" in capsys.readouterr().out

"""``tune-network --keep-builders-busy / --no-keep-builders-busy`` reach the network tuner;
left out, the tuner decides (on with the GPU runner)."""

from __future__ import annotations

import argparse

import pytest


class _Stop(Exception):
    pass


@pytest.mark.parametrize("flag, want", [([], None), (["--keep-builders-busy"], True),
                                        (["--no-keep-builders-busy"], False)])
def test_the_flag_reaches_the_network_tuner(monkeypatch, flag, want):
    from ptxforge.cli import tune

    parser = argparse.ArgumentParser()
    tune.add_tune_network_parser(parser.add_subparsers(dest="cmd"))
    args = parser.parse_args(["tune-network", "bert", "--trials", "10", "--log", "x.json",
                              *flag])
    seen = {}

    def fake(*a, **kw):
        seen.update(kw)
        raise _Stop

    monkeypatch.setattr(tune, "tune_network", fake)
    with pytest.raises(_Stop):
        tune._tune_network(args, [], [], "gpu", 10, False, "x.tasks.txt")
    assert seen["keep_builders_busy"] is want

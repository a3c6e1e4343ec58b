"""``tune-network --keep-builders-busy / --no-keep-builders-busy`` reach the network tuner;
left out, the tuner decides (on with the GPU runner)."""

from __future__ import annotations

import argparse

import pytest


class _Stop(Exception):
    pass


def tune_network_kwargs(monkeypatch, *flags) -> dict:
    """The keyword arguments ``tune-network bert --trials 10 --log x.json *flags`` hands
    the network tuner (``autosched.network_tuning.tune_network``), which is not run."""
    from ptxforge.cli import tune

    parser = argparse.ArgumentParser()
    tune.add_tune_network_parser(parser.add_subparsers(dest="cmd"))
    args = parser.parse_args(["tune-network", "bert", "--trials", "10", "--log", "x.json",
                              *flags])
    seen = {}

    def fake(*a, **kw):
        seen.update(kw)
        raise _Stop

    monkeypatch.setattr(tune, "tune_network", fake)
    with pytest.raises(_Stop):
        tune._tune_network(args, [], [], "gpu", 10, False, "x.tasks.txt")
    return seen


@pytest.mark.parametrize("flag, want", [([], None), (["--keep-builders-busy"], True),
                                        (["--no-keep-builders-busy"], False)])
def test_the_flag_reaches_the_network_tuner(monkeypatch, flag, want):
    assert tune_network_kwargs(monkeypatch, *flag)["keep_builders_busy"] is want

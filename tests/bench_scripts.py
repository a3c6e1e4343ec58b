"""The scripts of ``bench/`` as modules, for tests that check what they compute."""

from __future__ import annotations

import importlib.util
import os
import sys
from types import ModuleType

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")
"""The checkout's ``bench`` folder."""


def load_bench(name: str) -> ModuleType:
    """``bench/<name>.py`` loaded as the module ``name`` (registered in ``sys.modules``:
    dataclasses look their module up by name)."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(BENCH, f"{name}.py"))
    if spec is None or spec.loader is None:
        raise FileNotFoundError(f"no bench script {name}.py in {BENCH}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod

"""Test configuration: GPU tests run only where a CUDA GPU answers."""

from __future__ import annotations

import functools
import os

import pytest

# every IR a pass produces in the test suite must print, parse back and print the same
os.environ.setdefault("PTXFORGE_CHECK_ROUNDTRIP", "1")


@functools.lru_cache(maxsize=1)
def gpu_available() -> bool:
    try:
        from cuda.bindings import driver
    except Exception:
        return False
    try:
        (err,) = driver.cuInit(0)
        if int(err) != 0:
            return False
        err, count = driver.cuDeviceGetCount()
        return int(err) == 0 and count > 0
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if gpu_available():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU with a CUDA driver; none found here")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)

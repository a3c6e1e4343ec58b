"""ptxforge: a tensor compiler and auto-tuner for NVIDIA GPUs."""

from . import ir, nd, ops, te
from .driver import BuiltModule, build, lower
from .ir.compute_dag import ComputeDAG
from .nd import cuda, gpu, sim

__version__ = "0.1.0"

__all__ = ["ir", "te", "nd", "ops", "ComputeDAG", "build", "lower", "BuiltModule", "sim", "cuda",
           "gpu", "__version__"]

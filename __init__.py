"""ptxforge: a tensor compiler and auto-tuner for NVIDIA GPUs.

The names below are imported on first use, so that ``ptxforge.runtime`` (loading and running
exported modules) imports neither the compiler nor LLVM."""

import importlib

__version__ = "0.1.0"

_LAZY = {"ir": (".ir", None), "nd": (".nd", None), "ops": (".ops", None), "te": (".te", None),
         "BuiltModule": (".driver", "BuiltModule"), "build": (".driver", "build"),
         "build_attention": (".driver", "build_attention"),
         "lower": (".driver", "lower"), "ComputeDAG": (".passes.schedule.dag", "ScheduleDAG"),
         "cuda": (".nd", "cuda"), "gpu": (".nd", "gpu"), "sim": (".nd", "sim"),
         "tune_torch": (".torch_backend", "tune_torch")}


def __getattr__(name: str):
    if name in _LAZY:
        module, attr = _LAZY[name]
        mod = importlib.import_module(module, __name__)
        value = mod if attr is None else getattr(mod, attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__all__ = ["ir", "te", "nd", "ops", "ComputeDAG", "build", "build_attention", "lower",
           "BuiltModule", "sim", "cuda", "gpu", "tune_torch", "__version__"]

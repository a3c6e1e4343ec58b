"""The front end and the tensor IR: dtypes, scalar expressions, te, ComputeDAG, statements."""

from . import dtype, expr, te
from .compute_dag import ComputeDAG

__all__ = ["dtype", "expr", "te", "ComputeDAG"]

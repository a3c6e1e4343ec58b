"""``tvm.te``: the tensor expression language and schedules (``ptxforge.te``)."""

from ..te import *  # noqa: F401,F403
from ..te import __all__  # noqa: F401


def var(name: str = "tindex", dtype: str = "int32", span=None):
    """Symbolic shapes do not exist here: raises, saying what to do instead."""
    from ..te import TEError

    raise TEError(f"te.var({name!r}): shapes are static in ptxforge; declare the tensor with a "
                  f"concrete shape (an int per dimension) and build one kernel per shape")


def extern(shape, inputs, fcompute, name: str = "extern", **kwargs):
    """External calls are not compiled here: raises, saying what to do instead."""
    from ..te import TEError

    raise TEError(f"te.extern({name!r}): ptxforge compiles only te.compute stages; write the "
                  f"computation with te.compute, or run the external function in numpy on "
                  f"the host between kernels")


def comm_reducer(fcombine, fidentity, name: str = "reduce"):
    """Custom (and tuple) reducers are not compiled here: raises, saying what to do
    instead."""
    from ..te import TEError

    raise TEError(f"te.comm_reducer({name!r}): ptxforge reduces with te.sum, te.max and "
                  f"te.min only, over one value; a tuple reduction (argmax-style) is not "
                  f"supported: compute each reduction in its own stage (a tuple te.compute "
                  f"may combine their element-wise results)")

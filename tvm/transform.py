"""``tvm.transform``: ``PassContext(opt_level=3, config=...)``."""

from ..passes import PassContext as _PassContext


def PassContext(opt_level: int = 2, required_pass=None, disabled_pass=None, instruments=(),
                config: dict | None = None, **kwargs) -> _PassContext:
    """TVM's pass context. ``opt_level``, ``required_pass`` and ``disabled_pass`` have no
    meaning in ptxforge (its pipeline is fixed per target) and are ignored; ``config`` and
    ``instruments`` go to :class:`ptxforge.passes.PassContext`."""
    return _PassContext(tuple(instruments), config=config, **kwargs)

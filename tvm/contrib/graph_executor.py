"""``tvm.contrib.graph_executor``: ``GraphModule(lib["default"](dev))``."""

from ...graph import GraphModule as _GraphModule


def GraphModule(factory, dev=None) -> _GraphModule:
    """A runnable network: ``GraphModule(lib["default"](dev))`` as in TVM, or
    ``GraphModule(lib, dev)``."""
    from ..relay import _BoundFactory, _Factory

    if isinstance(factory, _GraphModule):  # lib["default"](dev) of a loaded network
        return factory
    if isinstance(factory, _BoundFactory):
        return _GraphModule(factory.lib, factory.dev)
    if isinstance(factory, _Factory):
        return _GraphModule(factory.lib, dev)
    return _GraphModule(factory, dev)

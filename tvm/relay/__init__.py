"""``tvm.relay``: ``relay.build`` and ``relay.testing`` over :mod:`ptxforge.graph`."""

from dataclasses import dataclass

from ... import graph as _graph


@dataclass(frozen=True)
class _BoundFactory:
    lib: object
    dev: object


@dataclass(frozen=True)
class _Factory:
    """What ``relay.build`` returns: ``lib["default"](dev)`` binds it to a device."""

    lib: object

    def __getitem__(self, name: str):
        if name != "default":
            raise KeyError(f"a built network has only the 'default' entry, not {name!r}")
        return lambda dev=None: _BoundFactory(self.lib, dev)

    def __getattr__(self, name):
        return getattr(self.lib, name)


def build(mod, target="cuda", params=None, target_host=None):
    """``relay.build(mod, target=, params=)``: ``mod`` is a ptxforge graph (from
    ``relay.testing`` or ``graph.from_onnx``); ``target_host`` has no meaning and is ignored."""
    if isinstance(mod, dict) and "main" in mod:
        mod = mod["main"]
    return _Factory(_graph.build(mod, target=target, params=params))


from . import testing  # noqa: E402,F401

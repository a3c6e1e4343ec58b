"""``tvm.relay.testing``: networks with random weights from :mod:`ptxforge.graph.zoo`.

``get_workload`` returns ``(mod, params)`` where ``mod["main"]`` is the ptxforge graph."""

from types import SimpleNamespace

from ...graph import get_network


def _workload(name: str, batch_size: int = 1, dtype: str = "float32", layout: str = "NCHW",
              image_shape=None, **kwargs):
    size = None
    if image_shape is not None:
        size = int(image_shape[1] if layout == "NCHW" else image_shape[0])
    net, params, _, _ = get_network(name, batch_size, layout=layout, dtype=dtype,
                                    image_size=size, **kwargs)
    return {"main": net}, params


def _resnet(num_layers: int = 18, batch_size: int = 1, image_shape=(3, 224, 224),
            dtype: str = "float32", layout: str = "NCHW", **kwargs):
    return _workload(f"resnet-{num_layers}", batch_size, dtype, layout, image_shape, **kwargs)


def _mobilenet(batch_size: int = 1, image_shape=(3, 224, 224), dtype: str = "float32",
               layout: str = "NCHW", **kwargs):
    return _workload("mobilenet", batch_size, dtype, layout, image_shape, **kwargs)


resnet = SimpleNamespace(get_workload=_resnet)
mobilenet = SimpleNamespace(get_workload=_mobilenet)

__all__ = ["resnet", "mobilenet", "get_network"]

"""The model zoo: networks with seeded random weights, as ``tvm.relay.testing`` offers.

:func:`get_network` is the tutorial's ``get_network``::

    net, params, input_shape, output_shape = get_network("resnet-18", batch_size=1,
                                                         layout="NHWC")

Names: ``resnet-18``, ``resnet-34``, ``resnet-50`` (relay.testing's ResNet),
``resnet_v1-18/34/50`` (torchvision's ResNet, as PyTorch runs it), ``mobilenet`` (v1),
``mobilenet_v2``, ``squeezenet_v1.0``, ``squeezenet_v1.1``, ``inception_v3`` (299x299) and
``bert`` (one BERT-base encoder layer over [batch, 128, 768]).
"""

from __future__ import annotations

from ..ir import Graph, GraphError, graph_from_outputs
from .bert import bert_encoder, bert_layer
from .inception import inception_v3
from .layers import NetBuilder
from .mobilenet import mobilenet, mobilenet_v2
from .resnet import resnet, resnet_v1
from .squeezenet import squeezenet

_CNN = ("resnet-18", "resnet-34", "resnet-50", "resnet_v1-18", "resnet_v1-34", "resnet_v1-50",
        "mobilenet", "mobilenet_v2", "squeezenet_v1.0", "squeezenet_v1.1", "inception_v3")


def list_networks() -> list[str]:
    """The names :func:`get_network` knows."""
    return list(_CNN) + ["bert"]


def get_network(name: str, batch_size: int = 1, layout: str = "NHWC", dtype: str = "float32",
                *, image_size: int | None = None, num_classes: int = 1000, seed: int = 0,
                width: float = 1.0, seq_len: int = 128
                ) -> tuple[Graph, dict, tuple, tuple]:
    """A network with random weights: ``(net, params, input_shape, output_shape)``.

    Args:
        name: see :func:`list_networks`.
        batch_size: the batch dimension.
        layout: ``"NHWC"`` or ``"NCHW"`` for the convolutional networks (BERT ignores it).
        dtype: the dtype of data and weights.
        image_size: input height and width (default 224, 299 for inception_v3); smaller
            inputs make small versions for testing.
        num_classes: classifier outputs.
        seed: the weights' random seed.
        width: channel multiplier of the MobileNets (``alpha``).
        seq_len: BERT's sequence length.
    """
    if batch_size < 1:
        raise GraphError(f"batch_size must be at least 1, got {batch_size}")
    if name == "bert":
        out, params, shape = bert_layer(batch_size, dtype, seq_len, seed=seed)
        return graph_from_outputs(out), params, shape, shape
    if name not in _CNN:
        raise GraphError(f"unknown network {name!r}; known: {', '.join(list_networks())}")
    if layout not in ("NCHW", "NHWC"):
        raise GraphError(f"invalid layout {layout!r}; use NHWC or NCHW")
    size = image_size or (299 if name == "inception_v3" else 224)
    common = {"image_size": size, "num_classes": num_classes, "seed": seed}
    if name.startswith("resnet-"):
        out, params, shape = resnet(int(name.split("-")[1]), batch_size, layout, dtype, **common)
    elif name.startswith("resnet_v1-"):
        out, params, shape = resnet_v1(int(name.split("-")[1]), batch_size, layout, dtype,
                                       **common)
    elif name == "mobilenet":
        out, params, shape = mobilenet(batch_size, layout, dtype, alpha=width, **common)
    elif name == "mobilenet_v2":
        out, params, shape = mobilenet_v2(batch_size, layout, dtype, alpha=width, **common)
    elif name.startswith("squeezenet_v"):
        out, params, shape = squeezenet(name.split("_v")[1], batch_size, layout, dtype, **common)
    else:
        out, params, shape = inception_v3(batch_size, layout, dtype, **common)
    net = graph_from_outputs(out)
    return net, params, shape, (batch_size, num_classes)


__all__ = ["NetBuilder", "get_network", "list_networks"]

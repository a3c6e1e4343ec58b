"""Small convolutional networks built from plain PyTorch modules that mirror torchvision's
blocks one for one (ResNet's BasicBlock, ConvNeXt's CNBlock, EfficientNet's MBConv,
MobileNetV3's InvertedResidual, Conv2dNormActivation, SqueezeExcitation), so the same
graphs export wherever torch runs, with or without a torchvision build matching it.

Widths and depths are small (test data stays a few hundred KB); the structure, the
activations and the order of operations are torchvision's.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class ConvNormAct(nn.Sequential):
    """torchvision.ops.Conv2dNormActivation: conv (no bias), batch norm, activation."""

    def __init__(self, cin, cout, k=3, stride=1, groups=1, act=nn.ReLU, norm=True):
        layers = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=not norm)]
        if norm:
            layers.append(nn.BatchNorm2d(cout))
        if act is not None:
            layers.append(act(inplace=True) if act in (nn.ReLU, nn.Hardswish, nn.SiLU)
                          else act())
        super().__init__(*layers)


class SqueezeExcitation(nn.Module):
    """torchvision.ops.SqueezeExcitation: global average, two 1x1 convs, a gate."""

    def __init__(self, channels, squeeze, act=nn.ReLU, gate=nn.Sigmoid):
        super().__init__()
        self.fc1 = nn.Conv2d(channels, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, channels, 1)
        self.act, self.gate = act(), gate()

    def forward(self, x):
        s = F.adaptive_avg_pool2d(x, 1)
        return x * self.gate(self.fc2(self.act(self.fc1(s))))


# -- ResNet-18 -------------------------------------------------------------------------------


class BasicBlock(nn.Module):
    """torchvision.models.resnet.BasicBlock."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                            nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + identity)


class ResNet18(nn.Module):
    """torchvision.models.resnet18's layout (7x7 stem, max pool, 4 stages of 2 basic blocks,
    average pool, fully connected) at widths ``width * (1, 2, 4, 8)``."""

    def __init__(self, width=8, num_classes=10):
        super().__init__()
        w = [width, 2 * width, 4 * width, 8 * width]
        self.conv1 = nn.Conv2d(3, w[0], 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(w[0])
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        stages, cin = [], w[0]
        for k, c in enumerate(w):
            stages.append(nn.Sequential(BasicBlock(cin, c, 1 if k == 0 else 2),
                                        BasicBlock(c, c, 1)))
            cin = c
        self.layers = nn.Sequential(*stages)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(w[-1], num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.avgpool(self.layers(x))
        return self.fc(torch.flatten(x, 1))


# -- ConvNeXt --------------------------------------------------------------------------------


class LayerNorm2d(nn.LayerNorm):
    """torchvision.models.convnext.LayerNorm2d: layer norm over channels of NCHW."""

    def forward(self, x):
        x = x.permute(0, 2, 3, 1)
        x = F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


class CNBlock(nn.Module):
    """torchvision.models.convnext.CNBlock: depthwise 7x7, channels-last layer norm, MLP
    with GELU, layer scale (stochastic depth is the identity in eval)."""

    def __init__(self, dim, layer_scale=1e-6):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.act = nn.GELU()
        # torchvision initialises this to 1e-6; a larger value keeps the blocks visible
        self.layer_scale = nn.Parameter(torch.full((dim, 1, 1), 0.5 + layer_scale))

    def forward(self, x):
        y = self.dwconv(x).permute(0, 2, 3, 1)
        y = self.fc2(self.act(self.fc1(self.norm(y)))).permute(0, 3, 1, 2)
        return x + self.layer_scale * y


class ConvNeXt(nn.Module):
    """torchvision.models.convnext_tiny's layout: 4x4 patch stem, four stages of CNBlocks
    with LayerNorm2d + 2x2 downsampling between, average pool, norm, linear head."""

    def __init__(self, dims=(8, 16, 32, 64), depths=(1, 1, 2, 1), num_classes=10):
        super().__init__()
        layers = [nn.Sequential(nn.Conv2d(3, dims[0], 4, 4), LayerNorm2d(dims[0], eps=1e-6))]
        for k, (d, n) in enumerate(zip(dims, depths)):
            layers.append(nn.Sequential(*[CNBlock(d) for _ in range(n)]))
            if k + 1 < len(dims):
                layers.append(nn.Sequential(LayerNorm2d(d, eps=1e-6),
                                            nn.Conv2d(d, dims[k + 1], 2, 2)))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.norm = LayerNorm2d(dims[-1], eps=1e-6)
        self.head = nn.Linear(dims[-1], num_classes)

    def forward(self, x):
        x = self.norm(self.avgpool(self.features(x)))
        return self.head(torch.flatten(x, 1))


# -- EfficientNet ----------------------------------------------------------------------------


class MBConv(nn.Module):
    """torchvision.models.efficientnet.MBConv: expand 1x1, depthwise, squeeze-excitation
    (SiLU), project 1x1; a residual when the shape is kept."""

    def __init__(self, cin, cout, k, stride, expand):
        super().__init__()
        mid = cin * expand
        layers = []
        if mid != cin:
            layers.append(ConvNormAct(cin, mid, 1, act=nn.SiLU))
        layers += [ConvNormAct(mid, mid, k, stride, groups=mid, act=nn.SiLU),
                   SqueezeExcitation(mid, max(1, cin // 4), act=nn.SiLU),
                   ConvNormAct(mid, cout, 1, act=None)]
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        y = self.block(x)
        return x + y if self.residual else y


class EfficientNet(nn.Module):
    """torchvision.models.efficientnet_b0's layout at a fraction of its widths and depth."""

    # (expand, kernel, stride, in, out, layers), as torchvision's MBConvConfig
    STAGES = ((1, 3, 1, 8, 8, 1), (6, 3, 2, 8, 12, 2), (6, 5, 2, 12, 16, 1),
              (6, 3, 2, 16, 24, 1))

    def __init__(self, num_classes=10, last=64):
        super().__init__()
        layers = [ConvNormAct(3, 8, 3, 2, act=nn.SiLU)]
        for expand, k, stride, cin, cout, n in self.STAGES:
            for j in range(n):
                layers.append(MBConv(cin if j == 0 else cout, cout, k, stride if j == 0 else 1,
                                     expand))
        layers.append(ConvNormAct(self.STAGES[-1][4], last, 1, act=nn.SiLU))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, num_classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


# -- MobileNetV3 -----------------------------------------------------------------------------


class InvertedResidual(nn.Module):
    """torchvision.models.mobilenetv3.InvertedResidual: expand, depthwise, optional
    squeeze-excitation gated by a hard sigmoid, project; ReLU or hardswish."""

    def __init__(self, cin, k, mid, cout, use_se, act, stride):
        super().__init__()
        layers = []
        if mid != cin:
            layers.append(ConvNormAct(cin, mid, 1, act=act))
        layers.append(ConvNormAct(mid, mid, k, stride, groups=mid, act=act))
        if use_se:
            layers.append(SqueezeExcitation(mid, _make_divisible(mid // 4), gate=nn.Hardsigmoid))
        layers.append(ConvNormAct(mid, cout, 1, act=None))
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        y = self.block(x)
        return x + y if self.residual else y


def _make_divisible(v, divisor=8):
    return max(divisor, int(v + divisor / 2) // divisor * divisor)


class MobileNetV3(nn.Module):
    """torchvision.models.mobilenet_v3_small's layout, fewer blocks."""

    # (in, kernel, expanded, out, use_se, activation, stride), as torchvision's config
    BLOCKS = ((16, 3, 16, 16, True, nn.ReLU, 2), (16, 3, 72, 24, False, nn.ReLU, 2),
              (24, 3, 88, 24, False, nn.ReLU, 1), (24, 5, 96, 40, True, nn.Hardswish, 2),
              (40, 5, 120, 48, True, nn.Hardswish, 1))

    def __init__(self, num_classes=10, last=64):
        super().__init__()
        layers = [ConvNormAct(3, 16, 3, 2, act=nn.Hardswish)]
        layers += [InvertedResidual(*b) for b in self.BLOCKS]
        layers.append(ConvNormAct(48, 6 * 48, 1, act=nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Linear(6 * 48, last), nn.Hardswish(inplace=True),
                                        nn.Dropout(0.2), nn.Linear(last, num_classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


# -- a small UNet from the same blocks -------------------------------------------------------


class DoubleConv(nn.Sequential):
    def __init__(self, cin, cout):
        super().__init__(ConvNormAct(cin, cout, 3), ConvNormAct(cout, cout, 3))


class SmallUNet(nn.Module):
    """A two-level UNet: Conv2dNormActivation pairs, max-pool down, one transposed-conv and
    one nearest-upsample way up, skip connections by concatenation, a 1x1 head."""

    def __init__(self, cin=3, width=8, classes=2):
        super().__init__()
        w = width
        self.enc1, self.enc2 = DoubleConv(cin, w), DoubleConv(w, 2 * w)
        self.mid = DoubleConv(2 * w, 4 * w)
        self.up2 = nn.ConvTranspose2d(4 * w, 2 * w, 2, stride=2)
        self.dec2 = DoubleConv(4 * w, 2 * w)
        self.up1 = nn.Upsample(scale_factor=2, mode="nearest")
        self.dec1 = DoubleConv(2 * w + w, w)
        self.head = nn.Conv2d(w, classes, 1)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(F.max_pool2d(e1, 2))
        m = self.mid(F.max_pool2d(e2, 2))
        d2 = self.dec2(torch.cat([self.up2(m), e2], dim=1))
        d1 = self.dec1(torch.cat([self.up1(d2), e1], dim=1))
        return self.head(d1)

"""The EfficientNet image encoder of Würstchen 2 and Stable Cascade, in plain torch.

Both families encode training images with torchvision's EfficientNetV2-S feature extractor
followed by a 1x1 convolution to 16 channels and a batch norm ("effnet_encoder"). torchvision is
not a dependency here, so the feature extractor is written out with the same module tree and
parameter names as `torchvision.models.efficientnet_v2_s().features`; the published weights
(`warp-ai/EfficientNetEncoder`, Stable Cascade's `effnet_encoder.safetensors`) load into it
unchanged: `backbone.<stage>.<block>.block.<layer>...` and `mapper.0/1`.

The layout, from torchvision's EfficientNetV2-S: a 3x3 stride-2 stem (Conv-BN-SiLU), six stages
(FusedMBConv, FusedMBConv, FusedMBConv, MBConv with squeeze-excitation, MBConv, MBConv) and a 1x1
head to 1280 channels; BatchNorm eps 1e-3; 32x downsampling. Stochastic depth is left out: the
encoder never trains. `widths`/`depths` shrink it for tiny test models with the same tree.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from diffusers import ConfigMixin, ModelMixin
from diffusers.configuration_utils import register_to_config
from torch import nn

# torchvision's EfficientNetV2-S: (block kind, expand ratio, kernel, stride, out channels, layers)
V2_S_STAGES = (
    ("fused", 1, 3, 1, 24, 2),
    ("fused", 4, 3, 2, 48, 4),
    ("fused", 4, 3, 2, 64, 4),
    ("mb", 4, 3, 2, 128, 6),
    ("mb", 6, 3, 1, 160, 9),
    ("mb", 6, 3, 2, 256, 15),
)
V2_S_STEM = 24
V2_S_HEAD = 1280
_BN_EPS = 1e-3


def _conv_bn(c_in: int, c_out: int, kernel: int, stride: int = 1, groups: int = 1, act: bool = True) -> nn.Sequential:
    """torchvision's Conv2dNormActivation: 0 = conv (no bias), 1 = BatchNorm, 2 = SiLU."""
    layers: list[nn.Module] = [
        nn.Conv2d(c_in, c_out, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
        nn.BatchNorm2d(c_out, eps=_BN_EPS),
    ]
    if act:
        layers.append(nn.SiLU(inplace=True))
    return nn.Sequential(*layers)


class _SqueezeExcitation(nn.Module):
    def __init__(self, channels: int, squeeze: int):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, channels, 1)
        self.activation = nn.SiLU()
        self.scale_activation = nn.Sigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = self.scale_activation(self.fc2(self.activation(self.fc1(self.avgpool(x)))))
        return x * scale


class _Block(nn.Module):
    """FusedMBConv ("fused") or MBConv ("mb") with the residual when shape allows, as torchvision builds them."""

    def __init__(self, kind: str, c_in: int, c_out: int, expand: int, kernel: int, stride: int):
        super().__init__()
        hidden = c_in * expand
        layers: list[nn.Module] = []
        if kind == "fused":
            if expand != 1:
                layers += [_conv_bn(c_in, hidden, kernel, stride), _conv_bn(hidden, c_out, 1, act=False)]
            else:
                layers += [_conv_bn(c_in, c_out, kernel, stride)]
        else:
            if hidden != c_in:
                layers.append(_conv_bn(c_in, hidden, 1))
            layers += [
                _conv_bn(hidden, hidden, kernel, stride, groups=hidden),
                _SqueezeExcitation(hidden, max(1, c_in // 4)),
                _conv_bn(hidden, c_out, 1, act=False),
            ]
        self.block = nn.Sequential(*layers)
        self.use_residual = stride == 1 and c_in == c_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.block(x)
        return out + x if self.use_residual else out


def efficientnet_v2_features(
    widths: Sequence[int] | None = None, depths: Sequence[int] | None = None, head: int = V2_S_HEAD
) -> nn.Sequential:
    """`torchvision.models.efficientnet_v2_s().features`: index 0 the stem, 1-6 the stages, 7 the head.

    `widths` (stem + six stage widths) and `depths` (six layer counts) default to V2-S's."""
    widths = list(widths) if widths is not None else [V2_S_STEM] + [s[4] for s in V2_S_STAGES]
    depths = list(depths) if depths is not None else [s[5] for s in V2_S_STAGES]
    if len(widths) != 7 or len(depths) != 6:
        raise ValueError("EfficientNet widths need 7 entries (stem and six stages) and depths 6")
    layers: list[nn.Module] = [_conv_bn(3, widths[0], 3, 2)]
    c_in = widths[0]
    for (kind, expand, kernel, stride, _, _), c_out, depth in zip(V2_S_STAGES, widths[1:], depths, strict=True):
        stage = []
        for i in range(depth):
            stage.append(_Block(kind, c_in if i == 0 else c_out, c_out, expand, kernel, stride if i == 0 else 1))
        layers.append(nn.Sequential(*stage))
        c_in = c_out
    layers.append(_conv_bn(c_in, head, 1))
    return nn.Sequential(*layers)


class EfficientNetEncoder(ModelMixin, ConfigMixin):
    """Würstchen's `EfficientNetEncoder` (OneTrainer's `WuerstchenEfficientNetEncoder`): the
    V2-S features, then `mapper` = 1x1 conv to `c_latent` channels and a batch norm (without
    affine weights in Stable Cascade's file). Its output is the prior's latent image."""

    @register_to_config
    def __init__(
        self,
        c_latent: int = 16,
        c_cond: int = V2_S_HEAD,
        effnet: str = "efficientnet_v2_s",
        affine_batch_norm: bool = True,
        widths: list[int] | None = None,
        depths: list[int] | None = None,
    ):
        super().__init__()
        if effnet != "efficientnet_v2_s":
            raise ValueError(f"effnet_encoder: only the efficientnet_v2_s encoder is supported, not {effnet!r}")
        self.backbone = efficientnet_v2_features(widths, depths, head=c_cond)
        self.mapper = nn.Sequential(
            nn.Conv2d(c_cond, c_latent, kernel_size=1, bias=False),
            nn.BatchNorm2d(c_latent, affine=affine_batch_norm),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mapper(self.backbone(x))


def load_effnet_state_dict(encoder: EfficientNetEncoder, state_dict: dict[str, torch.Tensor], source: str) -> None:
    """Weights from a published effnet file; BatchNorm's `num_batches_tracked` counters may be
    absent (they do nothing in eval mode), anything else missing or extra is an error."""
    missing, unexpected = encoder.load_state_dict(state_dict, strict=False)
    missing = [k for k in missing if not k.endswith("num_batches_tracked")]
    unexpected = [k for k in unexpected if not k.endswith("num_batches_tracked")]
    if missing or unexpected:
        raise ValueError(
            f"effnet_encoder.model_name: {source} does not hold EfficientNetV2-S encoder weights "
            f"({len(missing)} missing, e.g. {missing[:2]}; {len(unexpected)} unexpected, e.g. {unexpected[:2]})"
        )

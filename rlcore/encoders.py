"""Image encoders for camera observations, and DrQ's random-shift augmentation.

Images stay uint8 from the env through the rollout and the replay buffer: a float32 copy is
four times the memory, and a buffer of 84x84x3 frames is where memory runs out first. They
become float only inside the network, where `ImageEncoder.forward` divides by 255.

Three encoders: NatureCNN (Mnih et al. 2015, "Human-level control through deep reinforcement
learning"), the usual choice for on-policy PPO/GRPO, and DrQ-v2's (Yarats et al. 2021,
"Mastering Visual Continuous Control: Improved Data-Augmented Reinforcement Learning") with its
Linear-LayerNorm-tanh trunk, for SAC, whose smaller stride also accepts smaller images.
`spatial` turns a short conv stack's maps into keypoints (expected (x, y) of each map's
softmax; Levine et al. 2016), for manipulation, where small objects' positions matter.
`random_shift` is the augmentation of DrQ (Kostrikov, Yarats and Fergus 2020), which DrQ-v2
keeps.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from rlcore.errors import ConfigError


@dataclass(frozen=True)
class _EncoderSpec:
    convs: tuple[tuple[int, int, int], ...]  # (out_channels, kernel, stride), ReLU after each
    center: float  # subtracted after /255
    # (conv output shape (C, H, W), features) -> the head over the conv stack's feature maps
    trunk: Callable[[tuple[int, int, int], int], nn.Module]


class SpatialKeypoints(nn.Module):
    """Feature maps to keypoints: a 1x1 conv makes `features / 2` maps, a spatial softmax
    turns each into the expected (x, y) of its activation in [-1, 1] (Levine et al. 2016,
    "End-to-End Training of Deep Visuomotor Policies"; robomimic's default). Where small
    objects are in the image is what manipulation needs, and a flattened conv stack keeps
    it only implicitly.
    """

    def __init__(self, maps: tuple[int, int, int], features: int) -> None:
        super().__init__()
        if features % 2:
            raise ConfigError(
                f"encoder 'spatial' outputs (x, y) pairs: features must be even, got {features}"
            )
        channels, height, width = maps
        self.keypoints = nn.Conv2d(channels, features // 2, 1)
        ys, xs = torch.meshgrid(
            torch.linspace(-1, 1, height), torch.linspace(-1, 1, width), indexing="ij"
        )
        self.register_buffer("grid", torch.stack((xs.reshape(-1), ys.reshape(-1)), 1))
        self.log_temperature = nn.Parameter(torch.full((features // 2, 1), math.log(3.0)))

    def forward(self, maps: torch.Tensor) -> torch.Tensor:
        """The (x, y) of each keypoint, flattened.

        Shape:
            maps: [B, C, H, W] -> [B, features]
        """
        logits = self.keypoints(maps).flatten(2)  # [B, K, H * W]
        # Standardised over the map, then sharpened by a learned temperature: raw logits of
        # a freshly initialised conv barely vary over a mostly uniform table, so the softmax
        # was near uniform, every keypoint sat at the centre whatever the image, and the
        # actor saw almost nothing of the camera (benchmarks/README.md, *observations*).
        var, mean = torch.var_mean(logits, -1, correction=0, keepdim=True)
        logits = (logits - mean) * (var + 1e-5).rsqrt() * self.log_temperature.exp()
        return (logits.softmax(-1) @ self.grid).flatten(1)  # [B, 2K]: (x, y) per keypoint


def _orthogonal(layer: nn.Conv2d | nn.Linear, gain: float) -> nn.Conv2d | nn.Linear:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


def _flat(maps: tuple[int, int, int]) -> int:
    return maps[0] * maps[1] * maps[2]


def _nature_trunk(maps: tuple[int, int, int], features: int) -> nn.Sequential:
    linear = _orthogonal(nn.Linear(_flat(maps), features), math.sqrt(2))
    return nn.Sequential(nn.Flatten(), linear, nn.ReLU())


def _drq_trunk(maps: tuple[int, int, int], features: int) -> nn.Sequential:
    linear = _orthogonal(nn.Linear(_flat(maps), features), 1.0)
    return nn.Sequential(nn.Flatten(), linear, nn.LayerNorm(features), nn.Tanh())


_SPECS: dict[str, _EncoderSpec] = {
    "nature": _EncoderSpec(((32, 8, 4), (64, 4, 2), (64, 3, 1)), 0.0, _nature_trunk),
    "drq": _EncoderSpec(((32, 3, 2), (32, 3, 1), (32, 3, 1), (32, 3, 1)), 0.5, _drq_trunk),
    "spatial": _EncoderSpec(((16, 5, 2), (16, 3, 2)), 0.0, SpatialKeypoints),
}
ENCODER_KINDS: tuple[str, ...] = tuple(_SPECS)


def _spec(kind: str) -> _EncoderSpec:
    if kind not in _SPECS:
        allowed = ", ".join(repr(k) for k in ENCODER_KINDS)
        raise ConfigError(f"encoder {kind!r}: unknown; allowed kinds: {allowed}")
    return _SPECS[kind]


def min_image_size(kind: str) -> int:
    """Return the smallest height (= width) whose last conv output of `kind` is at least 1x1."""
    # An unpadded conv gives floor((n - kernel) / stride) + 1 >= m iff n >= (m - 1) * stride +
    # kernel; walk the layers back from m = 1.
    size = 1
    for _, kernel, stride in reversed(_spec(kind).convs):
        size = (size - 1) * stride + kernel
    return size


def _shape_problem(shape: tuple[int, ...], kind: str) -> str | None:
    need = min_image_size(kind)
    if len(shape) != 3 or min(shape) < 1:
        return "an image encoder needs a channel-first (C, H, W) shape; give it C, H and W"
    channels, height, width = shape
    if channels > 4 and width <= 4:
        return "it looks channel-last (H, W, C); transpose it to channel-first (C, H, W)"
    if height >= need and width >= need:
        return None
    others = [k for k in ENCODER_KINDS if min_image_size(k) <= min(height, width)]
    hint = "".join(f"use encoder {k!r} or " for k in others[:1]) + "render larger images"
    return f"encoder {kind!r} needs images of at least {need}x{need}; {hint}"


def _dims(shape: tuple[int, ...]) -> str:
    return "x".join(str(d) for d in shape) if len(shape) == 3 else str(tuple(shape))


def check_image_shape(key: str, shape: tuple[int, ...], kind: str) -> None:
    """Raise `ConfigError` unless observation `key` of `shape` fits encoder `kind`."""
    problem = _shape_problem(tuple(shape), kind)
    if problem is not None:
        raise ConfigError(f"obs entry {key!r} is {_dims(tuple(shape))}: {problem}")


class ImageEncoder(nn.Module):
    """A conv stack and trunk mapping uint8 images to float32 features.

    `forward` takes uint8 only: a float image could be in [0, 1] or [0, 255], and scaling it
    again would train silently on the wrong range, so any other dtype raises `TypeError`.

    Shape:
        images: [..., C, H, W] uint8, with (C, H, W) == `shape`
        output: [..., features] float32
    """

    def __init__(self, shape: tuple[int, int, int], kind: str = "nature", features: int = 256):
        super().__init__()
        spec = _spec(kind)
        problem = _shape_problem(tuple(shape), kind)
        if problem is not None:
            raise ConfigError(f"ImageEncoder shape {_dims(tuple(shape))}: {problem}")
        self.shape = tuple(shape)
        self.features = features
        self.center = spec.center
        layers: list[nn.Module] = []
        in_channels = shape[0]
        for out_channels, kernel, stride in spec.convs:
            conv = nn.Conv2d(in_channels, out_channels, kernel, stride)
            layers += [_orthogonal(conv, math.sqrt(2)), nn.ReLU()]
            in_channels = out_channels
        self.convs = nn.Sequential(*layers)
        with torch.no_grad():
            x = torch.zeros(1, *self.shape)
            floats = x.numel()  # the float copy of the input, saved by the first conv
            for layer in self.convs:
                x = layer(x)
                if isinstance(layer, nn.Conv2d):
                    floats += 2 * x.numel()  # conv output and its ReLU output
        self.trunk = spec.trunk(tuple(x.shape[1:]), features)
        with torch.no_grad():
            for module in self.trunk.modules():  # each output the trunk saves for backward
                if isinstance(module, nn.Conv2d):
                    x = module(x)
                    floats += 2 * x.numel()
                elif isinstance(module, nn.Linear | nn.LayerNorm):
                    floats += 2 * features
        self._activation_floats = floats

    def activation_bytes_per_sample(self) -> int:
        """Estimated bytes one sample's forward + backward keeps alive, to size micro-batches.

        Twice each conv, linear and layer-norm output (it and its activation are saved for
        backward) plus the float input, at 4 bytes a float.
        """
        return 4 * self._activation_floats

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Encode uint8 images, scaled to [0, 1] (minus the kind's center) inside."""
        if images.dtype != torch.uint8:
            raise TypeError(f"ImageEncoder takes uint8 images (0-255), got {images.dtype}")
        if tuple(images.shape[-3:]) != self.shape:
            raise ValueError(f"ImageEncoder expects [..., {_dims(self.shape)}], got {images.shape}")
        lead = images.shape[:-3]
        x = images.reshape(-1, *self.shape).to(torch.float32).div_(255.0)
        if self.center:
            x = x.sub_(self.center)
        out = self.trunk(self.convs(x))
        return out.reshape(*lead, out.shape[-1])


def random_shift(
    images: torch.Tensor, pad: int = 4, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Shift each image by an independent random integer offset, replicating the border.

    Same as replicate-padding by `pad` and cropping back to H x W at an offset in [0, 2 * pad]
    per axis, drawn from `generator` (on the images' device). Keeps the dtype.

    Shape:
        images: [B, C, H, W]
        output: [B, C, H, W]
    """
    if images.dim() != 4:
        raise ValueError(f"random_shift takes [B, C, H, W] images, got {tuple(images.shape)}")
    if pad < 0:
        raise ValueError(f"random_shift pad must be >= 0, got {pad}")
    batch, channels, height, width = images.shape
    device = images.device
    offset = torch.randint(0, 2 * pad + 1, (batch, 2), generator=generator, device=device)
    # Padded pixel (i + dy, j + dx) is source pixel (i + dy - pad, j + dx - pad) clamped to
    # the image: replicate padding without materialising the padded batch.
    rows = (torch.arange(height, device=device) + offset[:, :1] - pad).clamp_(0, height - 1)
    cols = (torch.arange(width, device=device) + offset[:, 1:] - pad).clamp_(0, width - 1)
    index = (rows[:, :, None] * width + cols[:, None, :]).reshape(batch, 1, height * width)
    shifted = images.reshape(batch, channels, height * width).gather(
        2, index.expand(batch, channels, height * width)
    )
    return shifted.reshape(batch, channels, height, width)

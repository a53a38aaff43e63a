"""Top-down RGB camera for PushCube: one uint8 image per instance, drawn every env step.

Drawn over the world window [-0.55, 0.55]^2 (as `PushCube.render`), back to front: a dark
border, the light table, the goal region (a disc of radius `SUCCESS_DIST`), the cube (a
square of side `2 * CUBE_RADIUS`) and the pusher (a disc of radius `PUSHER_RADIUS`). A pixel
takes the colour of the frontmost shape that strictly contains its centre; edges are hard,
not anti-aliased, so every pixel holds exactly one of the five colours below. Each object is
bright in its own channel (pusher blue, cube red, goal green) and dark in another, so a CNN
can tell them apart channel by channel.

Minimum size: a shape's drawn radius (half-side for the cube) is `max(true size, 0.75 px)`.
Any point of the image lies within `sqrt(2) / 2 ≈ 0.71` px of the centre of the pixel that
contains it, so the pixel holding an object's centre is always painted with that object,
unless a shape in front covers it; at 48 px and more no object is enlarged.

Speed: the table and border never change, so a draw copies a prebuilt background and then
repaints only a K x K pixel window around each of the three objects (K spans the goal disc),
with instances on the innermost dimension so that every op is one long vectorised loop. A
window pixel gets the frontmost of all four shapes, found from separable x and y terms, so
windows of nearby objects may overlap and write equal values. Each shape's test yields a
float whose sign bit says "inside"; shifted and masked as an int32 it becomes the shape's
code (priority in the top byte, RGB in the others), so the maximum over shapes is the
frontmost shape's code and its bytes are the pixel's colour. No op reads a value back to
the host, so a draw never synchronises a CUDA stream.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass

import torch

from rlcore.envs.push_cube import CUBE_RADIUS, PUSHER_RADIUS, SUCCESS_DIST, TABLE_HALF

Color = tuple[int, int, int]

VIEW_HALF = 0.55
MIN_RADIUS_PX = 0.75
PUSHER_COLOR: Color = (40, 70, 235)
CUBE_COLOR: Color = (235, 120, 30)
GOAL_COLOR: Color = (60, 200, 80)
TABLE_COLOR: Color = (215, 215, 215)
BORDER_COLOR: Color = (40, 40, 40)
# State rows of the pusher, cube and goal positions (x, y each), in the shapes' order below.
_POSITION_ROWS = (0, 1, 4, 5, 6, 7)
_OBJECTS = 3
# Shapes front to back: pusher, cube, goal and the table (centred at the origin). A pixel
# inside none of them is border.
_SHAPES = 4
_IS_DISC = (1.0, 0.0, 1.0, 0.0)
# Positions further than this are moved here (NaN too), so that every distance stays finite.
_FAR = 1e6
# A window spans floor(2 * reach + this) + 1 pixels: one more when 2 * reach is within
# rounding of an integer, where the first and last pixel centres both touch the disc.
_SPAN_MARGIN_PX = 1e-3


def _code(priority: int, color: Color) -> int:
    """An int32 whose memory bytes are (R, G, B, priority) with the priority most significant."""
    if sys.byteorder == "little":
        return color[0] | color[1] << 8 | color[2] << 16 | priority << 24
    return priority << 24 | color[0] << 16 | color[1] << 8 | color[2]


# The byte of a code that holds channel 0 (R); G and B follow it.
_FIRST_COLOR_BYTE = 0 if sys.byteorder == "little" else 1


@dataclass(frozen=True)
class _Workspace:
    """Buffers of one draw of `n` instances, instances last (see the module docstring)."""

    centres: torch.Tensor  # [4 shapes, 2 (x, y), n] float; the table's stays 0
    start: torch.Tensor  # [3 objects, 2, n] float: first window column (x) and row (y)
    start_long: torch.Tensor  # [3, 2, n] long
    world: torch.Tensor  # [3, 2, K, n] float: world x / y of the window's pixel centres
    dist_sq: torch.Tensor  # [3 windows, 4 shapes, 2, K, n] float: squared axis distances
    row_in: torch.Tensor  # [3, 4, K, n] bool: the window row crosses the shape
    bound: torch.Tensor  # [3, 4, K, n] float: a pixel is inside while dx^2 < bound
    excess: torch.Tensor  # [3, 4, K rows, K cols, n] float32: dx^2 - bound, negative inside
    code: torch.Tensor  # [3, K, K, n] int32: code of the frontmost shape
    base: torch.Tensor  # [3, n] long: element offset of each window's first pixel in `out`
    offset: torch.Tensor  # [3, K, K, n] long: element offsets of the window pixels
    relative: torch.Tensor  # [K, K] long: offsets of window pixels from its first
    env_ids: torch.Tensor  # [n] long

    @classmethod
    def allocate(cls, n: int, k: int, device: torch.device) -> _Workspace:
        def empty(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
            return torch.empty(shape, dtype=dtype, device=device)

        obj, shp = _OBJECTS, _SHAPES
        return cls(
            centres=torch.zeros(shp, 2, n, device=device),
            start=empty(obj, 2, n),
            start_long=empty(obj, 2, n, dtype=torch.long),
            world=empty(obj, 2, k, n),
            dist_sq=empty(obj, shp, 2, k, n),
            row_in=empty(obj, shp, k, n, dtype=torch.bool),
            bound=empty(obj, shp, k, n),
            excess=empty(obj, shp, k, k, n),
            code=empty(obj, k, k, n, dtype=torch.int32),
            base=empty(obj, n, dtype=torch.long),
            offset=empty(obj, k, k, n, dtype=torch.long),
            relative=empty(k, k, dtype=torch.long),
            env_ids=torch.arange(n, device=device),
        )


class TopDownView:
    """Draws `[N, 3, size, size]` uint8 top-down views of PushCube states (module docstring).

    Row 0 of an image is the top of the world window (largest y), column 0 its left edge.
    `window` is the side in pixels of the patch repainted around each object.
    """

    def __init__(self, num_envs: int, size: int, device: torch.device | str = "cpu") -> None:
        if num_envs <= 0:
            raise ValueError(f"num_envs must be positive, got {num_envs}")
        if size <= 0:
            raise ValueError(f"size must be positive, got {size}")
        self.num_envs, self.size = num_envs, size
        # As tensors report it ("cuda:0" for "cuda"), so that `_check` compares like with like.
        self.device = dev = torch.empty(0, device=device).device
        step = 2 * VIEW_HALF / size
        radii = [max(r, MIN_RADIUS_PX * step) for r in (PUSHER_RADIUS, CUBE_RADIUS, SUCCESS_DIST)]
        reach_px = max(radii) / step
        self.window = k = min(size, math.floor(2 * reach_px + _SPAN_MARGIN_PX) + 1)

        def column(values: tuple[float, ...] | list[float], *shape: int) -> torch.Tensor:
            return torch.tensor(values, dtype=torch.float32, device=dev).view(*shape)

        # Column u = (x + VIEW_HALF) / step, row v = (VIEW_HALF - y) / step; a window starts
        # at the first pixel whose centre (index + 0.5) can be within reach of the object.
        self._to_pixel = column((1 / step, -1 / step), 1, 2, 1)
        self._window_origin = column((VIEW_HALF / step - reach_px - 0.5,) * 2, 1, 2, 1)
        self._pixel_step = column((step, -step), 1, 2, 1, 1)
        self._pixel_origin = column((step / 2 - VIEW_HALF, VIEW_HALF - step / 2), 1, 2, 1, 1)
        self._window_ids = torch.arange(k, device=dev)
        self._window_ids_f = self._window_ids.float().view(k, 1)
        # A shape contains a pixel centre when dy^2 < threshold and
        # dx^2 < threshold - is_disc * dy^2 (a square of half-side h: threshold h^2).
        thresholds = [r * r for r in radii] + [TABLE_HALF**2]
        self._threshold = column(thresholds, 1, _SHAPES, 1, 1)
        self._is_disc = column(_IS_DISC, 1, _SHAPES, 1, 1)
        self._outside = torch.tensor(-1.0, device=dev)
        colors = (PUSHER_COLOR, CUBE_COLOR, GOAL_COLOR, TABLE_COLOR)
        codes = [_code(_SHAPES - i, color) for i, color in enumerate(colors)]
        self._codes = torch.tensor(codes, dtype=torch.int32, device=dev).view(1, _SHAPES, 1, 1, 1)
        self._border_code = _code(0, BORDER_COLOR)
        self._rows = torch.tensor(_POSITION_ROWS, device=dev)
        self._background = self._draw_background(colors[-1])
        self._work = _Workspace.allocate(num_envs, k, dev)

    def draw(self, state: torch.Tensor, out: torch.Tensor) -> None:
        """Write the view of every instance into `out` (any strides; nothing else is touched).

        Shape:
            state: [8, N] float32, PushCube's state rows
            out: [N, 3, size, size] uint8, on the view's device
        """
        self._check(state, out, self.num_envs)
        self._draw(state, out, self._work)

    def draw_ids(self, state_columns: torch.Tensor, out: torch.Tensor) -> None:
        """Write the views of `k` instances (episode ends); buffers are allocated per call.

        Shape:
            state_columns: [8, k] float32, the states of the instances to draw
            out: [k, 3, size, size] uint8
        """
        k = state_columns.shape[-1]
        self._check(state_columns, out, k)
        if k == 0:
            return
        same = k == self.num_envs
        work = self._work if same else _Workspace.allocate(k, self.window, self.device)
        self._draw(state_columns, out, work)

    def _check(self, state: torch.Tensor, out: torch.Tensor, n: int) -> None:
        """Fail on a caller's mistake, naming the expected shape (metadata only: no sync)."""
        if state.shape != (8, n) or state.dtype != torch.float32:
            raise ValueError(
                f"state must be float32 [8, {n}], got {state.dtype} {list(state.shape)}"
            )
        want = [n, 3, self.size, self.size]
        if list(out.shape) != want or out.dtype != torch.uint8:
            raise ValueError(f"out must be uint8 {want}, got {out.dtype} {list(out.shape)}")
        if state.device != self.device or out.device != self.device:
            raise ValueError(
                f"state and out must be on {self.device}, got {state.device} and {out.device}"
            )

    def _pixel_world(self, pixel: torch.Tensor, out: torch.Tensor) -> None:
        """World x / y of pixel centres; the background and the windows share this rounding."""
        torch.mul(pixel, self._pixel_step, out=out)
        out.add_(self._pixel_origin)

    def _draw_background(self, table_color: Color) -> torch.Tensor:
        """The border and table of one image, [3, size, size], as the windows paint them."""
        size, dev = self.size, self.device
        ids = torch.arange(size, dtype=torch.float32, device=dev).view(size, 1).expand(1, 2, -1, 1)
        world = torch.empty(1, 2, size, 1, device=dev)
        self._pixel_world(ids, world)
        on_table = world.view(2, size).square() < TABLE_HALF**2
        table = on_table[1].view(size, 1) & on_table[0].view(1, size)
        palette = torch.tensor((BORDER_COLOR, table_color), dtype=torch.uint8, device=dev)
        return palette[table.long()].permute(2, 0, 1).contiguous()

    def _draw(self, state: torch.Tensor, out: torch.Tensor, w: _Workspace) -> None:
        n, k, size = state.shape[1], self.window, self.size
        objects = w.centres[:_OBJECTS]
        torch.index_select(state, 0, self._rows, out=objects.view(2 * _OBJECTS, n))
        objects.nan_to_num_(_FAR, _FAR, -_FAR).clamp_(-_FAR, _FAR)
        # Each object's window, kept inside the image: one off the image repaints background.
        torch.addcmul(self._window_origin, objects, self._to_pixel, out=w.start)
        w.start.ceil_().clamp_(0, size - k)
        torch.add(w.start.unsqueeze(2), self._window_ids_f, out=w.world)
        self._pixel_world(w.world, w.world)
        # Every window pixel against every shape, from separable x and y terms.
        torch.sub(w.world.unsqueeze(1), w.centres.unsqueeze(2).unsqueeze(0), out=w.dist_sq)
        w.dist_sq.square_()
        dx_sq, dy_sq = w.dist_sq[:, :, 0], w.dist_sq[:, :, 1]
        torch.lt(dy_sq, self._threshold, out=w.row_in)
        torch.mul(dy_sq, self._is_disc, out=w.bound)
        torch.sub(self._threshold, w.bound, out=w.bound)
        torch.where(w.row_in, w.bound, self._outside, out=w.bound)
        torch.sub(dx_sq.unsqueeze(2), w.bound.unsqueeze(3), out=w.excess)
        # Sign bit -> all ones inside, zero outside; the frontmost shape has the largest code.
        bits = w.excess.view(torch.int32)
        bits.bitwise_right_shift_(31).bitwise_and_(self._codes)
        torch.amax(bits, dim=1, out=w.code)
        w.code.clamp_(min=self._border_code)
        # Element offsets of the window pixels in `out`'s memory, by its own strides.
        s_env, s_chan, s_row, s_col = out.stride()
        w.start_long.copy_(w.start)
        torch.mul(w.start_long[:, 1], s_row, out=w.base)
        w.base.add_(w.start_long[:, 0], alpha=s_col).add_(w.env_ids, alpha=s_env)
        torch.mul(self._window_ids.view(k, 1).expand(k, k), s_row, out=w.relative)
        w.relative.add_(self._window_ids, alpha=s_col)
        torch.add(w.base.view(_OBJECTS, 1, 1, n), w.relative.view(k, k, 1), out=w.offset)
        out.copy_(self._background.expand(n, 3, size, size))
        color_bytes = w.code.view(torch.uint8).view(-1, 4)
        offsets = w.offset.view(-1)
        for channel in range(3):
            memory = _memory_of(out, channel * s_chan)
            memory.scatter_(0, offsets, color_bytes[:, _FIRST_COLOR_BYTE + channel])


def _memory_of(tensor: torch.Tensor, shift: int) -> torch.Tensor:
    """A 1-D view of `tensor`'s memory from its first element + `shift` to its last element."""
    last = sum(
        (size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride(), strict=True)
    )
    return tensor.as_strided((last + 1 - shift,), (1,), tensor.storage_offset() + shift)

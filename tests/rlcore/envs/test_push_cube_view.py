"""TopDownView: colours at object centres, tiny images, strided outputs and a reference."""

from __future__ import annotations

import math

import pytest
import torch

from rlcore.envs.push_cube import (
    CUBE_LIMIT,
    CUBE_RADIUS,
    PUSHER_LIMIT,
    PUSHER_RADIUS,
    SUCCESS_DIST,
    TABLE_HALF,
)
from rlcore.envs.push_cube_view import (
    BORDER_COLOR,
    CUBE_COLOR,
    GOAL_COLOR,
    PUSHER_COLOR,
    TABLE_COLOR,
    TopDownView,
)

HALF = 0.55  # the world window is [-0.55, 0.55]^2, as PushCube.render


def _state(
    pusher: tuple[float, float], cube: tuple[float, float], goal: tuple[float, float]
) -> torch.Tensor:
    """One instance's [8, 1] state column (rows: pusher, pusher velocity, cube, goal)."""
    return torch.tensor([*pusher, 0.0, 0.0, *cube, *goal]).view(8, 1)


def _separated_states(n: int, seed: int) -> torch.Tensor:
    """[8, n] states with pusher, cube and goal at least 0.15 m apart (nothing occluded)."""
    gen = torch.Generator().manual_seed(seed)
    pos = torch.rand(20 * n, 3, 2, generator=gen) * 0.9 - 0.45
    gaps = torch.stack([(pos[:, i] - pos[:, j]).norm(dim=1) for i, j in ((0, 1), (0, 2), (1, 2))])
    pos = pos[gaps.min(0).values >= 0.15][:n]
    assert len(pos) == n
    state = torch.zeros(8, n)
    state[0:2], state[4:6], state[6:8] = pos[:, 0].T, pos[:, 1].T, pos[:, 2].T
    return state


def _pixel(x: float, y: float, size: int) -> tuple[int, int]:
    """(row, column) of the pixel containing world point (x, y); row 0 is the top."""
    per_px = 2 * HALF / size
    return math.floor((HALF - y) / per_px), math.floor((x + HALF) / per_px)


def _draw(state: torch.Tensor, size: int) -> torch.Tensor:
    out = torch.empty(state.shape[1], 3, size, size, dtype=torch.uint8)
    TopDownView(state.shape[1], size).draw(state, out)
    return out


def _color_at(image: torch.Tensor, row: int, col: int) -> tuple[int, ...]:
    return tuple(image[:, row, col].tolist())


def _reference(state: torch.Tensor, size: int) -> torch.Tensor:
    """Per-pixel painter's algorithm over the pixel centres, sizes at least 0.75 px."""
    per_px = 2 * HALF / size
    centres = -HALF + (torch.arange(size) + 0.5) * per_px
    x, y = centres.view(1, 1, size), centres.flip(0).view(1, size, 1)
    image = torch.empty(state.shape[1], size, size, 3, dtype=torch.uint8)
    image[:] = torch.tensor(BORDER_COLOR, dtype=torch.uint8)
    on_table = (x.abs() < TABLE_HALF) & (y.abs() < TABLE_HALF)
    image[on_table.expand_as(image[..., 0])] = torch.tensor(TABLE_COLOR, dtype=torch.uint8)

    def at(row: int) -> torch.Tensor:
        return state[row].view(-1, 1, 1)

    def radius(r: float) -> float:
        return max(r, 0.75 * per_px)

    gx, gy, cx, cy, px, py = at(6), at(7), at(4), at(5), at(0), at(1)
    goal = (x - gx) ** 2 + (y - gy) ** 2 < radius(SUCCESS_DIST) ** 2
    half = radius(CUBE_RADIUS)
    cube = ((x - cx).abs() < half) & ((y - cy).abs() < half)
    pusher = (x - px) ** 2 + (y - py) ** 2 < radius(PUSHER_RADIUS) ** 2
    for mask, color in ((goal, GOAL_COLOR), (cube, CUBE_COLOR), (pusher, PUSHER_COLOR)):
        image[mask] = torch.tensor(color, dtype=torch.uint8)
    return image.permute(0, 3, 1, 2)


def test_colours_lead_in_their_own_channel() -> None:
    # pusher mostly blue, cube mostly red, goal mostly green: each a different channel
    for color, channel in ((PUSHER_COLOR, 2), (CUBE_COLOR, 0), (GOAL_COLOR, 1)):
        assert max(range(3), key=lambda c: color[c]) == channel
    assert len({PUSHER_COLOR, CUBE_COLOR, GOAL_COLOR, TABLE_COLOR, BORDER_COLOR}) == 5


def test_shape_dtype_device_and_background() -> None:
    state = _state(pusher=(-0.3, -0.3), cube=(0.3, 0.3), goal=(0.3, -0.3))
    out = _draw(state, 64)
    assert out.shape == (1, 3, 64, 64) and out.dtype == torch.uint8 and out.device.type == "cpu"
    # The window overhangs the table by 0.05 m, about 2.9 px at 64 px: border there.
    for row, col in ((0, 0), (0, 63), (63, 0), (63, 63), (1, 32), (32, 62)):
        assert _color_at(out[0], row, col) == BORDER_COLOR
    assert _color_at(out[0], *_pixel(0.0, 0.0, 64)) == TABLE_COLOR
    assert _color_at(out[0], *_pixel(-0.45, 0.45, 64)) == TABLE_COLOR


@pytest.mark.parametrize("size", [24, 48, 64, 84, 128])
def test_each_object_centre_has_its_colour(size: int) -> None:
    state = _separated_states(32, seed=size)
    out = _draw(state, size)
    for i in range(state.shape[1]):
        for rows, color in (((0, 1), PUSHER_COLOR), ((4, 5), CUBE_COLOR), ((6, 7), GOAL_COLOR)):
            x, y = state[rows[0], i].item(), state[rows[1], i].item()
            assert _color_at(out[i], *_pixel(x, y, size)) == color, (i, color)


def test_objects_at_table_and_window_corners() -> None:
    size = 48
    at_limits = _state(
        pusher=(PUSHER_LIMIT, PUSHER_LIMIT),
        cube=(-CUBE_LIMIT, -CUBE_LIMIT),
        goal=(CUBE_LIMIT, -CUBE_LIMIT),
    )
    # Centres exactly at corners of the window: only a quarter of each shape is in view,
    # and the corner pixel's centre is 0.71 px from the corner, inside the shape.
    at_window = _state(pusher=(HALF, HALF), cube=(-HALF, -HALF), goal=(HALF, -HALF))
    at_table = _state(pusher=(-TABLE_HALF, TABLE_HALF), cube=(TABLE_HALF, 0.0), goal=(0.0, 0.0))
    out = _draw(torch.cat((at_limits, at_window, at_table), dim=1), size)
    for i, state in enumerate((at_limits, at_table)):
        image = out[2 * i]
        assert _color_at(image, *_pixel(*state[0:2, 0].tolist(), size)) == PUSHER_COLOR
        assert _color_at(image, *_pixel(*state[4:6, 0].tolist(), size)) == CUBE_COLOR
        assert _color_at(image, *_pixel(*state[6:8, 0].tolist(), size)) == GOAL_COLOR
    last = size - 1
    assert _color_at(out[1], 0, last) == PUSHER_COLOR
    assert _color_at(out[1], last, 0) == CUBE_COLOR
    assert _color_at(out[1], last, last) == GOAL_COLOR


def test_objects_off_the_window_or_nan_draw_only_the_background() -> None:
    empty = _state(pusher=(3.0, -3.0), cube=(-2.0, 0.0), goal=(1e30, math.inf))
    nan = _state(pusher=(math.nan, 0.0), cube=(0.0, math.nan), goal=(math.nan, math.nan))
    out = _draw(torch.cat((empty, nan), dim=1), 32)
    table = torch.tensor(TABLE_COLOR, dtype=torch.uint8).view(3, 1)
    assert (out[0] == out[1]).all()
    assert (out[0].flatten(1) == table).all(0).sum() > 0.7 * 32 * 32
    assert {tuple(c) for c in out.permute(0, 2, 3, 1).reshape(-1, 3).tolist()} == {
        TABLE_COLOR,
        BORDER_COLOR,
    }


@pytest.mark.parametrize("size", [12, 24])
def test_every_object_covers_a_pixel_at_tiny_sizes(size: int) -> None:
    # At 24 px a pixel is 4.6 cm: the pusher (2 cm radius) is drawn with 0.75 px radius.
    state = _separated_states(64, seed=size)
    out = _draw(state, size).permute(0, 2, 3, 1)
    for color in (PUSHER_COLOR, CUBE_COLOR, GOAL_COLOR):
        count = (out == torch.tensor(color, dtype=torch.uint8)).all(-1).sum((1, 2))
        assert count.min() >= 1, color


# Not 11, 33, ..., 77: an odd multiple of 11 puts pixel centres exactly on the table edge,
# where the two float32 roundings of the centre may fall on either side.
@pytest.mark.parametrize("size", [13, 24, 48, 64, 84])
def test_matches_a_per_pixel_reference(size: int) -> None:
    gen = torch.Generator().manual_seed(size)
    state = torch.rand(8, 128, generator=gen) * 1.2 - 0.6  # overlaps and window edges too
    differ = (_draw(state, size) != _reference(state, size)).any(1)
    # The two inside tests (dx^2 < r^2 - dy^2 here, dx^2 + dy^2 < r^2 there) may round apart
    # only for a pixel centre within float32 rounding of an edge.
    assert differ.sum() <= differ.numel() * 1e-4


def test_draw_into_strided_views_equals_a_fresh_tensor() -> None:
    n, size = 16, 40
    state = _separated_states(n, seed=1)
    state[0:2, 0] = torch.tensor([HALF, -HALF])  # a window clamped at the image corner
    fresh = _draw(state, size)
    view = TopDownView(n, size)
    time_major = torch.full((3, n, 3, size, size), 7, dtype=torch.uint8)
    view.draw(state, time_major[1])
    assert torch.equal(time_major[1], fresh)
    assert (time_major[0] == 7).all() and (time_major[2] == 7).all()
    interleaved = torch.full((n, 2, 3, size, size), 7, dtype=torch.uint8)
    view.draw(state, interleaved[:, 1])
    assert torch.equal(interleaved[:, 1], fresh) and (interleaved[:, 0] == 7).all()
    channel_last = torch.zeros(n, size, size, 3, dtype=torch.uint8)
    view.draw(state, channel_last.permute(0, 3, 1, 2))
    assert torch.equal(channel_last.permute(0, 3, 1, 2), fresh)


def test_draw_ids_rows_equal_draw_rows() -> None:
    n, size = 12, 48
    state = torch.rand(8, n, generator=torch.Generator().manual_seed(3)) - 0.5
    view = TopDownView(n, size)
    full = torch.empty(n, 3, size, size, dtype=torch.uint8)
    view.draw(state, full)
    for ids in ([5, 0, 11], list(range(n)), []):
        some = torch.empty(len(ids), 3, size, size, dtype=torch.uint8)
        view.draw_ids(state[:, ids], some)
        assert torch.equal(some, full[ids])


def test_deterministic() -> None:
    state = torch.rand(8, 20, generator=torch.Generator().manual_seed(4)) - 0.5
    view = TopDownView(20, 64)
    first, second = (torch.empty(20, 3, 64, 64, dtype=torch.uint8) for _ in range(2))
    view.draw(state, first)
    view.draw(state, second)
    assert torch.equal(first, second) and torch.equal(first, _draw(state, 64))


def test_rejects_mismatched_arguments() -> None:
    view = TopDownView(4, 32)
    state = torch.zeros(8, 4)
    with pytest.raises(ValueError, match="out must be uint8"):
        view.draw(state, torch.empty(4, 32, 32, 3, dtype=torch.uint8))
    with pytest.raises(ValueError, match="out must be uint8"):
        view.draw(state, torch.empty(4, 3, 32, 32))
    with pytest.raises(ValueError, match=r"state must be float32 \[8, 4\]"):
        view.draw(torch.zeros(8, 3), torch.empty(4, 3, 32, 32, dtype=torch.uint8))
    with pytest.raises(ValueError, match="size must be positive"):
        TopDownView(4, 0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu() -> None:
    state = torch.rand(8, 64, generator=torch.Generator().manual_seed(5)) * 1.2 - 0.6
    out = torch.empty(64, 3, 64, 64, dtype=torch.uint8, device="cuda")
    TopDownView(64, 64, "cuda").draw(state.cuda(), out)
    assert torch.equal(out.cpu(), _draw(state, 64))

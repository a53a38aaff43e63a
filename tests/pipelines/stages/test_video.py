"""The `video` stage: the grid episodes are tiled on and the agent's view beside the scene."""

import torch

from pipelines.stages.video import tile


def test_tile_lays_frames_out_row_major_with_even_sides():
    frames = torch.zeros(3, 5, 5, 3, dtype=torch.uint8)
    for i in range(3):
        frames[i] = 10 * (i + 1)
    grid = tile(frames, columns=2)
    assert grid.shape == (2 * 5 + 3 * 2, 2 * 5 + 3 * 2, 3)  # 16 x 16: already even
    assert grid[2, 2, 0] == 10 and grid[2, 9, 0] == 20 and grid[9, 2, 0] == 30
    assert grid[9, 9, 0] == 40  # the empty cell keeps the border gray
    odd = tile(torch.zeros(1, 5, 5, 3, dtype=torch.uint8), columns=1)
    assert odd.shape[0] % 2 == 0 and odd.shape[1] % 2 == 0


def test_agent_view_shows_the_actors_newest_frame_beside_the_scene():
    """Each camera image the actor reads is scaled to the frame size by nearest neighbour:
    every camera pixel becomes a sharp block; a stacked image shows its newest frame, a
    gray one in gray."""
    from pipelines.stages.video import agent_view

    rgb = torch.randint(0, 256, (2, 3, 4, 4), dtype=torch.uint8)
    stacked = torch.cat([torch.zeros_like(rgb), rgb], dim=1)  # 2 frames: the newest last
    gray = torch.randint(0, 256, (2, 1, 4, 4), dtype=torch.uint8)
    view = agent_view([stacked, gray], size=8)
    assert view.shape == (2, 8, 16, 3)
    assert torch.equal(view[:, ::2, 0:8:2], rgb.permute(0, 2, 3, 1))
    assert torch.equal(view[:, 1::2, 1:8:2], rgb.permute(0, 2, 3, 1))
    assert torch.equal(view[:, ::2, 8::2], gray[:, 0, :, :, None].expand(-1, -1, -1, 3))

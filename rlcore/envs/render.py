"""Batched software rasteriser: envs draw RGB frames of many instances with tensor ops."""

from __future__ import annotations

import torch

Color = tuple[int, int, int]


class Canvas:
    """A batch of `n` square RGB images over a world window, drawn shape by shape.

    Shape:
        image: [n, size, size, 3] uint8; row 0 is the top of the world window
    """

    def __init__(
        self,
        n: int,
        size: int,
        x_range: tuple[float, float],
        y_range: tuple[float, float] | None = None,
        device: torch.device | str = "cpu",
        background: Color = (255, 255, 255),
    ) -> None:
        y_range = y_range or x_range
        self.image = torch.empty(n, size, size, 3, dtype=torch.uint8, device=device)
        self.image[:] = torch.tensor(background, dtype=torch.uint8, device=device)
        step_x = (x_range[1] - x_range[0]) / size
        step_y = (y_range[1] - y_range[0]) / size
        cols = torch.arange(size, device=device, dtype=torch.float32) + 0.5
        # [1, 1, size] world x of each column, [1, size, 1] world y of each row
        self._px = (x_range[0] + cols * step_x).view(1, 1, size)
        self._py = (y_range[1] - cols * step_y).view(1, size, 1)

    def _paint(self, mask: torch.Tensor, color: Color) -> None:
        rgb = torch.tensor(color, dtype=torch.uint8, device=self.image.device)
        self.image[mask] = rgb

    def fill_rect(
        self, cx: torch.Tensor, cy: torch.Tensor, width: float, height: float, color: Color
    ) -> None:
        """Axis-aligned rectangles centred at (cx[i], cy[i])."""
        inside_x = (self._px - cx.view(-1, 1, 1)).abs() <= width / 2
        inside_y = (self._py - cy.view(-1, 1, 1)).abs() <= height / 2
        self._paint(inside_x & inside_y, color)

    def fill_circle(self, cx: torch.Tensor, cy: torch.Tensor, radius: float, color: Color) -> None:
        """Discs centred at (cx[i], cy[i])."""
        dx = self._px - cx.view(-1, 1, 1)
        dy = self._py - cy.view(-1, 1, 1)
        self._paint(dx * dx + dy * dy <= radius * radius, color)

    def draw_segment(
        self,
        x0: torch.Tensor,
        y0: torch.Tensor,
        x1: torch.Tensor,
        y1: torch.Tensor,
        width: float,
        color: Color,
    ) -> None:
        """Thick line segments from (x0[i], y0[i]) to (x1[i], y1[i])."""
        x0, y0 = x0.view(-1, 1, 1), y0.view(-1, 1, 1)
        dx, dy = x1.view(-1, 1, 1) - x0, y1.view(-1, 1, 1) - y0
        length_sq = (dx * dx + dy * dy).clamp_min(1e-12)
        u = (((self._px - x0) * dx + (self._py - y0) * dy) / length_sq).clamp(0.0, 1.0)
        ex, ey = self._px - (x0 + u * dx), self._py - (y0 + u * dy)
        self._paint(ex * ex + ey * ey <= (width / 2) ** 2, color)

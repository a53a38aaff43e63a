"""One torch thread per test process: results then do not depend on the machine's core count,
and a machine busy with other work is not oversubscribed (two threads contending for one
free core made small updates ~10x slower here). And the render settings the CLI sets."""

import os

import torch

from rlcore.envs.headless import headless_render_env

torch.set_num_threads(1)

# What `python -m pipelines` sets at its entry where no display is set (rlcore only reads the
# environment): tests that render, here or in the processes they start, run as the CLI does.
# Set before any test imports mujoco, which reads MUJOCO_GL once.
os.environ.update(headless_render_env())

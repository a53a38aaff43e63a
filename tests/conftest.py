"""One torch thread per test process: results then do not depend on the machine's core count,
and a machine busy with other work is not oversubscribed (two threads contending for one
free core made small updates ~10x slower here)."""

import torch

torch.set_num_threads(1)

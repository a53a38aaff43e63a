"""Helpers every benchmark shares (benchmarks/common.py)."""

import pytest
import torch

from benchmarks.common import device_arg


def test_device_arg_gives_the_device_or_one_line_naming_the_flag():
    assert device_arg("cpu") == torch.device("cpu")
    with pytest.raises(SystemExit, match=r"^--device: Expected one of"):
        device_arg("bogus")
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit, match="--device cuda: CUDA is not available"):
            device_arg("cuda")
    else:
        assert device_arg("cuda").type == "cuda"

import subprocess
import sys

import pytest

from rlcore.config import ACTIVATION_NAMES, ENV_NAMES, EnvConfig, PolicyConfig
from rlcore.envs import ENVS
from rlcore.policies import ACTIVATIONS


def test_config_names_match_what_the_library_builds():
    assert tuple(ENVS) == ENV_NAMES
    assert tuple(ACTIVATIONS) == ACTIVATION_NAMES


def test_reading_configs_imports_neither_torch_nor_tensordict():
    # The report stage, flows and params validation start fast because of this.
    code = (
        "import sys, rlcore.config, pipelines.params;"
        "print(','.join(m for m in ('torch', 'tensordict') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


@pytest.mark.parametrize("device", ["cpu", "cuda", "cuda:1", "mps"])
def test_env_config_accepts_torch_device_strings(device):
    assert EnvConfig(device=device).device == device


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"device": "gpu"}, "env.device must be a torch device"),
        ({"name": "atari"}, "env.name must be one of"),
        ({"frame_stack": 0}, r"env.frame_stack must be an integer in \[1, 16\]"),
        ({"frame_stack": 17}, r"env.frame_stack must be an integer in \[1, 16\].*got 17"),
    ],
)
def test_env_config_rejects_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        EnvConfig(**kwargs)


def test_policy_config_rejects_unknown_activation():
    with pytest.raises(ValueError, match=r"policy.activation must be one of \['elu', 'relu'"):
        PolicyConfig(activation="gelu")

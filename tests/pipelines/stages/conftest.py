"""Fixtures the stage tests share."""

import pytest

from pipelines.params import parse_params
from tests.pipelines.stages.tiny_experiment import TINY


@pytest.fixture
def params():
    return parse_params(TINY)

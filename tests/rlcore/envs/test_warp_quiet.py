"""The Warp engine keeps Warp's per-kernel "Module ... load on device" lines out of the
stage's log; runs without the mujoco-warp extra (fake `warp` and `mujoco_warp` modules)."""

import importlib
import sys
import types

import pytest
import torch

pytest.importorskip("mujoco")


class WarpStartedError(Exception):
    pass


def fake_warp(verbose: bool) -> types.ModuleType:
    warp = types.ModuleType("warp")
    warp.config = types.SimpleNamespace(verbose=verbose, quiet=False)

    def init():
        raise WarpStartedError(warp.config.quiet)  # what the config was when Warp started

    warp.init = init
    return warp


@pytest.mark.parametrize(("verbose", "quiet"), [(False, True), (True, False)])
def test_warp_starts_quiet_unless_asked_to_be_verbose(monkeypatch, verbose, quiet):
    monkeypatch.setitem(sys.modules, "warp", fake_warp(verbose))
    monkeypatch.setitem(sys.modules, "mujoco_warp", types.ModuleType("mujoco_warp"))
    name = "rlcore.envs.mujoco_batch.warp_engine"
    real = sys.modules.pop(name, None)
    try:
        module = importlib.import_module(name)  # built on the fakes: never kept past here
        with pytest.raises(WarpStartedError) as started:
            module.WarpEngine(None, 1, torch.device("cpu"))
    finally:
        sys.modules.pop(name, None)
        if real is not None:
            sys.modules[name] = real
    assert started.value.args == (quiet,)

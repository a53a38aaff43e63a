import os
import stat

import pytest
import torch

from pipelines.files import (
    OutputError,
    StagedOutputs,
    check_writable,
    remove_stale_temporaries,
    write_json,
)
from rlcore.checkpoint import save_checkpoint


def test_staged_outputs_replace_all_targets_together(tmp_path):
    a, b = tmp_path / "x" / "a.json", tmp_path / "y" / "b.csv"
    with StagedOutputs([a, b]) as out:
        out.write_json(a, {"v": 1})
        out.write_text(b, "col\n1\n")
        assert not a.exists() and not b.exists()  # nothing is visible before the end
    assert a.read_text() == '{\n  "v": 1\n}\n' and b.read_text() == "col\n1\n"
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a.json", "b.csv", "x", "y"]


def test_a_failure_while_staging_keeps_every_previous_output(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    write_json(a, {"run": "old"})
    write_json(b, {"run": "old"})
    with pytest.raises(RuntimeError, match="disk full"), StagedOutputs([a, b]) as out:
        out.write_json(a, {"run": "new"})
        raise RuntimeError("disk full")
    assert a.read_text() == b.read_text() == '{\n  "run": "old"\n}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.json"]  # no temporaries


def test_an_output_never_written_is_an_error_and_nothing_is_replaced(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    with pytest.raises(ValueError, match="never written"), StagedOutputs([a, b]) as out:
        out.write_json(a, {})
    assert not a.exists()


def test_unwritable_outputs_fail_before_any_work_with_one_line(tmp_path, monkeypatch):
    (tmp_path / "outputs").write_text("a file where a directory goes")
    with pytest.raises(OutputError, match=r"outputs: is a file where the stage needs a dir"):
        check_writable(tmp_path / "outputs" / "seeds" / "0" / "final.pt")
    assert (tmp_path / "outputs").is_file()
    folder = tmp_path / "metrics"
    folder.mkdir()
    (folder / "curve.csv").mkdir()  # a directory where a file goes
    with pytest.raises(OutputError, match=r"curve\.csv: is a directory"):
        StagedOutputs([folder / "train.json", folder / "curve.csv"])
    # Permissions (faked: the suite may run as root, which bypasses them).
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, m: False if p == folder else real_access(p, m))
    with pytest.raises(
        OutputError, match=r"metrics: not writable, so train\.json cannot be written"
    ):
        check_writable(folder / "train.json")


def test_stale_temporaries_of_our_naming_are_removed_and_nothing_else(tmp_path):
    target = tmp_path / "final.pt"
    stale = [tmp_path / ".final.pt.abc123.tmp", tmp_path / ".final.pt.x9.tmp.pt"]
    kept = [tmp_path / "final.pt", tmp_path / ".final.ptx.tmp", tmp_path / "notes.tmp"]
    for path in stale + kept:
        path.write_text("x")
    assert sorted(remove_stale_temporaries(target)) == sorted(stale)
    assert all(p.exists() for p in kept) and not any(p.exists() for p in stale)


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_checkpoints_and_metrics_get_the_users_umask(tmp_path, umask, monkeypatch):
    import pipelines.files
    import rlcore.checkpoint

    monkeypatch.setattr(rlcore.checkpoint, "_UMASK", umask)
    monkeypatch.setattr(pipelines.files, "_UMASK", umask)
    save_checkpoint(tmp_path / "final.pt", {"w": torch.zeros(2)})
    write_json(tmp_path / "train.json", {})
    expected = 0o666 & ~umask
    for name in ("final.pt", "train.json"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == expected, name

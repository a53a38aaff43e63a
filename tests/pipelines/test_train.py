import json

from pipelines.train import main


def test_train_writes_a_run_folder_and_refuses_to_clobber_it(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert main(["--preset", "cartpole", "--run-dir", str(run_dir)]) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["eval/episode_return"] >= 475
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert any("loss/policy" in r for r in records) and any(
        "eval/episode_return" in r for r in records
    )
    assert "eval return" in capsys.readouterr().out  # progress is shown

    assert main(["--preset", "cartpole", "--run-dir", str(run_dir)]) == 2
    assert "--resume" in capsys.readouterr().err

    (run_dir / "checkpoint.pt").write_bytes(b"garbage")
    assert main(["--preset", "cartpole", "--run-dir", str(run_dir), "--resume"]) == 2
    assert "corrupt or truncated" in capsys.readouterr().err

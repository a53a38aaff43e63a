"""The study's reports (`pipelines.search.reports`)."""

import yaml

import pipelines.search.objective as objective_module
from pipelines.layout import Layout
from pipelines.params import parse_params
from pipelines.search.stage import search
from tests.pipelines.search.tiny_study import read_trials, run_cli, with_search


def test_a_study_on_several_kinds_of_machine_says_so(tmp_path, monkeypatch):
    params, layout = parse_params(with_search(n_trials=2, pruner="none")), Layout(tmp_path)
    machines = iter(["AMD EPYC (torch kernels AVX2)", "Intel Xeon (torch kernels AVX512)"])
    monkeypatch.setattr(objective_module, "machine_line", lambda provenance: next(machines))
    search(params, layout)
    assert [r["machine"] for r in read_trials(layout)] == [
        "AMD EPYC (torch kernels AVX2)", "Intel Xeon (torch kernels AVX512)"
    ]  # fmt: skip
    summary = (layout.search_reports / "summary.md").read_text()
    assert "trials ran on 2 kinds of machine (`trials.csv`, column `machine`)" in summary


def test_a_study_of_another_params_file_keeps_its_reports_apart(tmp_path):
    """`search --params search/other.yaml` must not touch the default study's reports (DVC
    tracks them): its own go beside them, under its study name."""
    default = with_search(n_trials=2, pruner="none")
    proc = run_cli(tmp_path, data=default)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    summary = (tmp_path / "reports" / "search" / "summary.md").read_text()

    (tmp_path / "search").mkdir()
    other = with_search(n_trials=2, pruner="none", study_name="other study")
    (tmp_path / "search" / "other.yaml").write_text(yaml.safe_dump(other))
    proc = run_cli(tmp_path, "--params", "search/other.yaml", data=default)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    assert "reports: reports/search-other-study/" in out

    own = Layout(tmp_path).for_search_params(tmp_path / "search" / "other.yaml", "other study")
    assert own.search_reports == tmp_path / "reports" / "search-other-study"
    assert own.search_html == tmp_path / "outputs" / "search-other-study" / "html"
    assert own.search_journal == Layout(tmp_path).search_journal  # one journal, many studies
    own_summary = (own.search_reports / "summary.md").read_text()
    assert "# Search: other study" in own_summary and "(2 of `n_trials` 2)" in own_summary
    assert (
        "ran from its own params file" in own_summary and "dvc exp run dvc.yaml" not in own_summary
    )
    assert len(read_trials(own)) == 2
    assert (own.search_html / "optimization_history.html").exists()
    assert own.search_metrics == tmp_path / "metrics" / "search-other-study.json"
    assert own.search_metrics.exists()
    # The default study's reports are untouched, and its params file keeps the plain paths.
    assert (tmp_path / "reports" / "search" / "summary.md").read_text() == summary
    assert Layout(tmp_path).for_search_params(tmp_path / "params.yaml", "x") == Layout(tmp_path)

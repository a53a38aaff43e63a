"""`python -m pipelines search` (`pipelines.search.cli`)."""

from tests.pipelines.search.tiny_study import run_cli, with_search


def test_search_cli_rejects_bad_params_with_one_line(tmp_path):
    proc = run_cli(tmp_path, data=with_search(sampler="grid"))
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 2
    assert "search.sampler" in out and "Traceback" not in out

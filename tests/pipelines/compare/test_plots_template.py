"""The offline DVC plots template (reports/plots_template.html) renders self-contained pages.

Runs the real ``dvc plots show`` (same interpreter, no network) in a throwaway DVC project and
checks the page it writes loads no external script and carries vega inline plus the plot data.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("dvc")

REPO = Path(__file__).resolve().parents[3]
VEGA_DIR = REPO / "reports" / "vega"
TEMPLATE = REPO / "reports" / "plots_template.html"
LIBRARIES = ("vega.min.js", "vega-lite.min.js", "vega-embed.min.js")

CSV = "env_steps,eval_return\n0,1.5\n1000,7.25\n2000,12.0\n"
DVC_YAML = "plots:\n  - eval.csv:\n      x: env_steps\n      y: eval_return\n"
EXTERNAL_SCRIPT = re.compile(r"<script\b[^>]*\bsrc\s*=", re.IGNORECASE)


def _dvc(cwd: Path, *args: str) -> str:
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "dvc", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, f"dvc {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("dvcproj")
    _dvc(root, "init", "--no-scm", "-q")
    (root / "eval.csv").write_text(CSV)
    (root / "dvc.yaml").write_text(DVC_YAML)
    return root


def _assert_offline_page(html: str) -> None:
    assert "{plot_divs}" not in html, "placeholder was not filled"
    assert not EXTERNAL_SCRIPT.search(html), "page loads an external script"
    assert "cdn.jsdelivr.net" not in html
    for name in LIBRARIES:
        js = (VEGA_DIR / name).read_text(encoding="utf-8")
        js = re.sub(r"\n?//# sourceMappingURL=\S+\s*$", "", js)
        assert js in html, f"{name} is not inlined verbatim"
    # The Vega-Lite spec with the CSV rows (DVC stores the values as strings).
    assert "vegaEmbed(" in html
    assert '"$schema": "https://vega.github.io/schema/vega-lite/v5.json"' in html
    for steps, ret in [("0", "1.5"), ("1000", "7.25"), ("2000", "12.0")]:
        assert f'"env_steps": "{steps}", "eval_return": "{ret}"' in html


def test_template_is_up_to_date():
    proc = subprocess.run(
        [sys.executable, str(VEGA_DIR / "build_template.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr


def test_cli_flag_renders_offline_page(project, tmp_path):
    out = tmp_path / "plots"
    _dvc(project, "plots", "show", "--html-template", str(TEMPLATE), "-o", str(out))
    _assert_offline_page((out / "index.html").read_text(encoding="utf-8"))


def test_repo_config_path_is_relative_to_dvc_dir(project, tmp_path):
    # DVC joins a relative plots.html_template with the .dvc directory (not the repo root), so a
    # repo's .dvc/config says `html_template = ../reports/plots_template.html`.
    rel = os.path.relpath(TEMPLATE, project / ".dvc")
    _dvc(project, "config", "plots.html_template", rel)
    try:
        out = tmp_path / "plots"
        _dvc(project, "plots", "show", "-o", str(out))
        _assert_offline_page((out / "index.html").read_text(encoding="utf-8"))
    finally:
        _dvc(project, "config", "--unset", "plots.html_template")

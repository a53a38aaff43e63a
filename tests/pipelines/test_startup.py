"""Stage start-up: what each stage process imports before it works (every import is paid
for by every stage of every `dvc repro`)."""

import subprocess
import sys


def imported_after(code: str) -> set[str]:
    probe = f"import sys\n{code}\nprint(' '.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_the_report_stage_and_the_error_handling_import_no_torch():
    modules = imported_after(
        "from pipelines.__main__ import _stage, _stage_errors\n_stage_errors()\n_stage('report')"
    )
    assert "pipelines.stages.report" in modules
    assert "torch" not in modules and "tensordict" not in modules

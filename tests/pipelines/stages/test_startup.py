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
        "from pipelines.stages.run import _stage, _stage_errors\n_stage_errors()\n_stage('report')"
    )
    assert "pipelines.stages.report" in modules
    assert "torch" not in modules and "tensordict" not in modules


def test_every_command_and_stage_names_a_function_that_exists():
    """`python -m pipelines` resolves commands from a table of `module:function` strings:
    a moved or renamed function must fail here, not in a user's run."""
    from pipelines.__main__ import COMMANDS
    from pipelines.stages.run import STAGE_ENTRIES, STAGES, entry

    assert set(STAGE_ENTRIES) == set(STAGES)
    for target in [*COMMANDS.values(), *STAGE_ENTRIES.values()]:
        assert callable(entry(target)), target

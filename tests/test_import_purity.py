import subprocess
import sys


def test_rlcore_imports_no_orchestration_packages():
    code = (
        "import sys, rlcore, rlcore.trainer, rlcore.envs;"
        "bad = [m for m in ('prefect', 'dvc', 'optuna', 'pydantic') if m in sys.modules];"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""

"""Every `pip install` hint in an error message names this distribution and a real extra."""

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HINT = re.compile(r"pip install (?:-e )?['\"]?([\w.-]+)\[([\w,-]+)\]")


def test_install_hints_name_this_distribution_and_its_extras():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = set(project["optional-dependencies"])
    hints = [
        (path.relative_to(ROOT), match.groups())
        for folder in ("rlcore", "pipelines")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for match in HINT.finditer(path.read_text())
    ]
    assert len(hints) >= 3  # the MuJoCo, MuJoCo Warp and CMA-ES hints at least
    for where, (dist, wanted) in hints:
        assert dist in (project["name"], "."), (where, dist)
        assert set(wanted.split(",")) <= extras, (where, wanted)

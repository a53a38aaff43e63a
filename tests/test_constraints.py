"""constraints.txt pins every package `make setup` and `make lock`'s extras install.

A dependency added to pyproject.toml without re-locking would install unpinned (whatever
is newest that day), and a pin outside pyproject's range would make `make setup` fail.
"""

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


def _pins() -> dict[str, Version]:
    pins: dict[str, Version] = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, sep, version = line.partition("==")
        assert sep and version.strip(), f"not an exact pin: {line!r}"
        assert canonicalize_name(name) not in pins, f"pinned twice: {name}"
        pins[canonicalize_name(name)] = Version(version.strip())
    return pins


def _locked_extras() -> list[str]:
    makefile = (ROOT / "Makefile").read_text()
    match = re.search(r"^LOCK_EXTRAS := (\S+)$", makefile, re.MULTILINE)
    assert match, "the Makefile's `lock` target names its extras in LOCK_EXTRAS"
    return match.group(1).split(",")


def test_every_dependency_is_pinned_inside_its_range():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    locked = _locked_extras()
    assert "dev" in locked and "bench" in locked
    assert set(locked) <= set(extras)
    pins = _pins()
    requirements = [Requirement(r) for r in project["dependencies"]]
    requirements += [Requirement(r) for extra in locked for r in extras[extra]]
    for requirement in requirements:
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement.name} is not in constraints.txt: run `make lock`"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"constraints.txt pins {name}=={pins[name]}, outside pyproject's {requirement}"
        )


def test_torch_pin_is_the_cpu_wheel_release():
    # Any other torch pulls the CUDA wheels; the local label (+cpu) must not be pinned,
    # so that the same file serves a machine whose wheel has none.
    assert str(_pins()["torch"]) == "2.13.0"

"""PPO on HalfCheetah: `benchmarks.locomotion --task halfcheetah` (the name older commands use).

.venv/bin/python -m benchmarks.halfcheetah --backends native gym sb3 --seeds 0 1 2
"""

from __future__ import annotations

import sys

from benchmarks.locomotion import main as locomotion_main


def main(argv: list[str] | None = None) -> None:
    arguments = sys.argv[1:] if argv is None else argv
    locomotion_main(["--task", "halfcheetah", *arguments])


if __name__ == "__main__":
    main()

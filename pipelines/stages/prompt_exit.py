"""A stage process ends as soon as its work and exit handlers are done.

Python's own shutdown then tears down every module and collects what is left, which takes
about a second once torch and tensordict are imported (0.9 s on our CPU machine, for
nothing: the process is ending). That second is paid by every stage of every `dvc repro`,
and it delays a stage stopped because `dvc` died (`lifeline`). The stages close their files
and writers themselves, so they skip it: exit handlers run (`atexit`: logging,
multiprocessing, DVCLive and torch's own), the standard streams are flushed, and the
process exits with its code.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from typing import NoReturn


def exit_promptly(code: int) -> NoReturn:
    """Exit with `code`, skipping the interpreter's teardown; a normal exit instead while a
    non-daemon thread still runs (Python waits for those, and so do we)."""
    main = threading.main_thread()
    if any(t is not main and t.is_alive() and not t.daemon for t in threading.enumerate()):
        raise SystemExit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed or broken stream: nothing to keep
            stream.flush()
    os._exit(code)

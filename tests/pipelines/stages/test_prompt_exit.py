"""A stage's process skips the interpreter's teardown but keeps what an exit must do."""

import subprocess
import sys
import textwrap

import pytest


def run(code: str, tmp_path) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(code))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)


def test_the_exit_code_exit_handlers_and_buffered_output_are_kept(tmp_path):
    done = run(
        """
        import atexit, sys
        from pipelines.stages.prompt_exit import exit_promptly
        atexit.register(lambda: print("handler ran", file=sys.stderr))
        sys.stdout.write("buffered, no newline")  # a pipe: block-buffered, not yet written
        exit_promptly(3)
        """,
        tmp_path,
    )
    assert done.returncode == 3
    assert done.stdout == "buffered, no newline"
    assert done.stderr == "handler ran\n"


def test_a_running_non_daemon_thread_is_waited_for(tmp_path):
    marker = tmp_path / "finished"
    done = run(
        f"""
        import threading, time
        from pathlib import Path
        from pipelines.stages.prompt_exit import exit_promptly
        def work():
            time.sleep(0.5)
            Path({str(marker)!r}).write_text("done")
        threading.Thread(target=work).start()
        exit_promptly(0)
        """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert marker.read_text() == "done"


@pytest.mark.parametrize("ending", ["exit_promptly(0)", "raise SystemExit(0)"])
def test_the_teardown_is_what_is_skipped(tmp_path, ending):
    """Python's teardown finalizes what is left (most of a second with torch imported:
    benchmarks/README, *pipeline_overhead*); a prompt exit does not run it, a normal exit does."""
    done = run(
        f"""
        import os
        from pipelines.stages.prompt_exit import exit_promptly
        class Left:
            def __del__(self):
                os.write(2, b"torn down")
        left = Left()
        {ending}
        """,
        tmp_path,
    )
    assert done.returncode == 0
    assert done.stderr == ("" if ending.startswith("exit_promptly") else "torn down")

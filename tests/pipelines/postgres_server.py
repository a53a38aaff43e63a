"""A real PostgreSQL server for the search tests, from the `pgserver` wheel's binaries.

`pgserver` ships PostgreSQL's own `initdb`, `pg_ctl` and `postgres` in a pip wheel, so the
suite needs no system package. Its `get_server` only serves a Unix socket without passwords;
the tests need what teams run: TCP on a port, a user with a password (SCRAM), so this starts
the binaries itself. PostgreSQL refuses to run as root: as root, the server runs as the
unprivileged user `pgserver` creates for the same reason, from a copy of the binaries in
the server's temporary directory (the venv's own path, e.g. under /root, may be closed to
that user; nothing outside the temporary directory is touched).
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

USER = "rl"
PASSWORD = "s3cret-pw"
SYSTEM_USER = "pgserver"  # pgserver's own name for it


def installed() -> Path:
    import pgserver

    return Path(pgserver.__file__).parent / "pginstall"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_server_user(root: Path) -> tuple[Path, dict[str, object]]:
    """The bin directory to run and the subprocess arguments that run it as a user
    PostgreSQL accepts."""
    if os.geteuid() != 0:
        return installed() / "bin", {}
    from pgserver.utils import ensure_user_exists

    ensure_user_exists(SYSTEM_USER)
    entry = pwd.getpwnam(SYSTEM_USER)
    copy = root / "pgserver" / "pginstall"  # the binaries find their libraries at
    shutil.copytree(installed(), copy, ignore=shutil.ignore_patterns("include"))
    libs = installed().parent.parent / "pgserver.libs"  # $ORIGIN/../../../pgserver.libs
    if libs.is_dir():
        shutil.copytree(libs, root / "pgserver.libs")
    for path in [root, *root.rglob("*")]:
        os.chown(path, entry.pw_uid, entry.pw_gid, follow_symlinks=False)
    return copy / "bin", {"user": entry.pw_uid, "group": entry.pw_gid}


@contextmanager
def postgres() -> Iterator[str]:
    """Start a server on a free localhost port; yield its SQLAlchemy URL; stop it."""
    root = Path(tempfile.mkdtemp(prefix="rl-pg-"))  # under /tmp: the server user can enter
    root.chmod(0o755)
    (root / "pw").write_text(PASSWORD)
    binaries, runner = _as_server_user(root)
    data, port = root / "data", free_port()
    run = lambda *args: subprocess.run(  # noqa: E731
        [str(binaries / args[0]), *args[1:]], check=True, capture_output=True, text=True,
        cwd=root, **runner,
    )  # fmt: skip
    try:
        run("initdb", "-D", str(data), "-U", USER, f"--pwfile={root / 'pw'}",
            "--auth=scram-sha-256", "--encoding=UTF8")  # fmt: skip
        options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c max_connections=200"
        run("pg_ctl", "-D", str(data), "-l", str(root / "log"), "-o", options, "-w", "start")
        yield f"postgresql+psycopg://{USER}:{PASSWORD}@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            [str(binaries / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
            capture_output=True, cwd=root, **runner,
        )  # fmt: skip
        shutil.rmtree(root, ignore_errors=True)

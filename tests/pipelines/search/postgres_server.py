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


class Server:
    """A PostgreSQL server in a temporary directory, on a free localhost port.

    `stop()` and `start()` again make an outage: the same data directory and port, so
    clients reconnect to the same URL once it is back.
    """

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="rl-pg-"))  # under /tmp: the server user
        self.root.chmod(0o755)  # can enter
        (self.root / "pw").write_text(PASSWORD)
        self.binaries, self.runner = _as_server_user(self.root)
        self.data, self.port = self.root / "data", free_port()
        self.url = f"postgresql+psycopg://{USER}:{PASSWORD}@127.0.0.1:{self.port}/postgres"
        try:
            self._run("initdb", "-D", str(self.data), "-U", USER, f"--pwfile={self.root / 'pw'}",
                      "--auth=scram-sha-256", "--encoding=UTF8")  # fmt: skip
        except BaseException:
            shutil.rmtree(self.root, ignore_errors=True)
            raise

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(self.binaries / args[0]), *args[1:]], check=check, capture_output=True,
            text=True, cwd=self.root, **self.runner,
        )  # fmt: skip

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c max_connections=200"
        )
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "log"), "-o", options,
                  "-w", "start")  # fmt: skip

    def stop(self, mode: str = "immediate") -> None:
        """Stop the server: `immediate` drops every connection at once, as a crash does
        (the next start recovers); `fast` ends them first, as a restart does."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop", check=False)

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


@contextmanager
def postgres_server() -> Iterator[Server]:
    """A started `Server`; stopped and deleted afterwards."""
    server = Server()
    try:
        server.start()
        yield server
    finally:
        server.remove()


@contextmanager
def postgres() -> Iterator[str]:
    """Start a server on a free localhost port; yield its SQLAlchemy URL; stop it."""
    with postgres_server() as server:
        yield server.url

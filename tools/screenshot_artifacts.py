"""Screenshot the report and compare artifacts in Prefect's UI, in a real browser.

A documented check, not a test: it needs a Chromium (`apt-get install chromium`) and the
project's results in the workspace (`make repro`). From the repository root:

    .venv/bin/python tools/screenshot_artifacts.py --out /tmp/artifacts

It starts its own `prefect server start` (UI included) on a free port with a throwaway
PREFECT_HOME, runs `python -m pipelines flow --stages report` (a no-op `dvc repro report`
when the results are current, then the report artifact) and `python -m pipelines flow
--compare`, then has headless Chromium load each artifact's page and write a PNG. It also
checks the pages' Markdown: every image a data URI, no link to a relative path. Look at
the PNGs: the learning curves must show, not broken-image icons.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

KEYS = ("report", "compare")
RELATIVE_TARGET = re.compile(r"\]\((?!data:|https?:|#)[^)]+\)")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_healthy(api: str, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{api}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise SystemExit(f"the Prefect server at {api} did not answer within {timeout_s:g} s")


def artifacts(api: str) -> list[dict]:
    response = httpx.post(f"{api}/artifacts/filter", json={"sort": "CREATED_DESC"}, timeout=30)
    response.raise_for_status()
    return response.json()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("artifact-screenshots"))
    parser.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    args = parser.parse_args()
    if shutil.which(args.chromium) is None:
        raise SystemExit(f"no Chromium at {args.chromium!r}: apt-get install chromium")
    args.out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    home = tempfile.mkdtemp(prefix="prefect-home-")
    env = {
        **os.environ,
        "PREFECT_HOME": home,
        "PREFECT_API_URL": api,
        "PREFECT_UI_API_URL": api,
        "DO_NOT_TRACK": "1",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    }
    prefect = str(Path(sys.executable).parent / "prefect")
    server_cmd = [prefect, "server", "start", "--host", "127.0.0.1", "--port", str(port)]
    with (args.out / "server.log").open("w") as log:
        server = subprocess.Popen(server_cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_healthy(api)
        for flow_args in (["--stages", "report"], ["--compare"]):
            cmd = [sys.executable, "-m", "pipelines", "flow", *flow_args]
            subprocess.run(cmd, env=env, check=True)
        found = {}
        for artifact in artifacts(api):
            kind = next((k for k in KEYS if (artifact.get("key") or "").endswith(k)), None)
            if kind and kind not in found:
                found[kind] = artifact
        problems = []
        for kind in KEYS:
            artifact = found.get(kind)
            if artifact is None:
                problems.append(f"no *-{kind} artifact was published")
                continue
            data = artifact["data"]
            images = data.count("](data:image/")
            if RELATIVE_TARGET.search(data):
                problems.append(f"{artifact['key']}: a relative link or image remains")
            page = f"http://127.0.0.1:{port}/artifacts/artifact/{artifact['id']}"
            shot = (args.out / f"{kind}.png").resolve()
            subprocess.run(
                [args.chromium, "--headless", "--no-sandbox", "--disable-gpu",
                 "--hide-scrollbars", "--window-size=1400,2400", "--virtual-time-budget=20000",
                 f"--screenshot={shot}", page],
                check=True, capture_output=True, timeout=120,
            )  # fmt: skip
            print(f"{artifact['key']}: {images} inlined image(s); {page} -> {shot}")
        for problem in problems:
            print(f"error: {problem}", file=sys.stderr)
        return 1 if problems else 0
    finally:
        server.terminate()
        server.wait(timeout=60)
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())

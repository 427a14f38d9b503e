"""The quick start of docs/clients/python.md, run as written: its code blocks
marked `<!-- quickstart -->` are taken from the doc verbatim, joined in order
into one script, and run in a subprocess (this interpreter, so the package
under test is the installed one) against a real server with the module.
Once undisturbed, and once with every client connection killed
(`CLIENT KILL TYPE normal`) while it writes: it must end as the doc says (it
finishes, or reports the loss), never crash or hang."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from conftest import REPO, Server

DOC = REPO / "docs/clients/python.md"
MARK = "<!-- quickstart -->"
# A bound for a hang only (the script runs in about 2 s): not a measure.
HANG_LIMIT_S = 120


def quickstart() -> str:
    """The marked blocks of the doc, in order, joined."""
    text = DOC.read_text()
    blocks = re.findall(re.escape(MARK) + r"\n```python\n(.*?)```\n", text, re.DOTALL)
    assert len(blocks) == text.count(MARK) >= 1, f"every {MARK} in {DOC} marks a python block"
    return "\n".join(blocks)


def start(tmp_path: Path, server: Server) -> subprocess.Popen[str]:
    script = tmp_path / "quickstart.py"
    script.write_text(quickstart())
    env = dict(os.environ, REDIS_URL=f"redis://127.0.0.1:{server.port}/")
    return subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=tmp_path,
    )


def finished(process: subprocess.Popen[str], before: str = "") -> str:
    try:
        out, _ = process.communicate(timeout=HANG_LIMIT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        out, _ = process.communicate()
        raise AssertionError(f"the quick start hung:\n{before}{out}") from None
    out = before + out
    assert process.returncode == 0 and "Traceback" not in out, out
    return out


def test_the_quickstart_runs_as_written(tmp_path: Path, server: Server, admin: Any) -> None:
    out = finished(start(tmp_path, server))
    assert "invoice 40 written with fence" in out, out
    assert out.rstrip().endswith("done"), out
    assert admin.get("billing:total") == b"6000"
    assert admin.exists("billing") == 0, "both leases released"


def test_the_quickstart_survives_its_connections_killed(
    tmp_path: Path, server: Server, admin: Any
) -> None:
    process = start(tmp_path, server)
    assert process.stdout is not None
    seen = ""
    while "invoice 5 " not in seen:  # in the middle of its writes
        line = process.stdout.readline()
        if not line:
            break
        seen += line
    # Every normal client but this one (SKIPME yes): the script's pool and
    # its watchdog's connection.
    killed = admin.execute_command("CLIENT", "KILL", "TYPE", "normal")
    out = finished(process, seen)
    assert killed >= 1, out
    # As the doc says: it went on and finished, or it saw the loss and said so.
    assert "invoice 40 written with fence" in out or "lost" in out, out
    assert out.rstrip().endswith("done"), out

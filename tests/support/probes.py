"""Plain-HTTP requests to the metrics listener (health and readiness probes), through curl."""

from __future__ import annotations

import json
import subprocess
from typing import Any

from tests.support.tools import tool
from tests.support.wm_process import WAIT


def get(port: int, path: str, *, method: str = "GET") -> tuple[int, Any]:
    """(status, body parsed as JSON when it is JSON) from curl."""
    curl = tool("curl")
    how = ["-I"] if method == "HEAD" else ["-X", method]  # -X HEAD would wait for a body
    done = subprocess.run(
        [curl, "-sS", *how, "-w", "\n%{http_code}", f"http://127.0.0.1:{port}{path}"],
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=True,
    )
    body, _, code = done.stdout.rpartition("\n")
    try:
        return int(code), json.loads(body)
    except ValueError:
        return int(code), body

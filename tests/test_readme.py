"""The README's API example, executed as written against a real Iris started like `make run`."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from iris_runtime.testing.server import IrisServer

ROOT = Path(__file__).resolve().parent.parent
MARKER = "<!-- readme-api-example"


def readme_example() -> str:
    text = (ROOT / "README.md").read_text()
    after = text[text.index(MARKER) :]
    match = re.search(r"```sh\n(.*?)```", after, re.DOTALL)
    assert match, "the README lost its API example"
    return match.group(1)


def test_readme_curl_calls_work_as_written(
    start_iris: Callable[..., IrisServer], tmp_path: Path
) -> None:
    assert shutil.which("curl"), "curl is missing: `make test` installs it (.ci/apt-packages)"
    # Like `make run`: data in ./.iris-data, token generated into the token file.
    server = start_iris(tmp_path / ".iris-data", IRIS_API_TOKEN="")
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    script = readme_example().replace("127.0.0.1:3000", f"127.0.0.1:{server.port}")
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    replies = [
        json.loads(line) for line in done.stdout.replace("}{", "}\n{").splitlines() if line.strip()
    ]
    message, stop = replies
    assert message["status"] == "done" and "summarise this" in message["text"]
    assert "SESSION-demo/attachments/" in message["text"]  # the staged file reached the prompt
    assert stop == {"stopped": False}
    assert (tmp_path / ".iris-data" / "api-token").stat().st_mode & 0o777 == 0o600

"""docs/openapi.yaml is the contract: schemathesis tests a served Iris against it and finds nothing.

The run is schemathesis' own CLI (``st run``) in a subprocess: it runs the examples, coverage,
fuzzing and stateful phases in one engine (links it infers in the earlier phases feed the
stateful one), applies every check, and its exit status is the verdict. Its settings
(bounded, deterministic examples; no deadline, schemathesis sets none) are in
``schemathesis.toml`` beside this file, the generator's knowledge of rules JSON Schema cannot
state in ``schemathesis_hooks.py``. The token reaches it through the environment, never argv.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from iris_runtime.testing.server import IrisServer, clean_environment

HERE = Path(__file__).resolve().parent
SPEC = HERE.parents[1] / "docs" / "openapi.yaml"
RUN_TIMEOUT = 240.0  # seconds: a bound on a hang; the run takes about a minute here
PHASES = ("Coverage", "Fuzzing", "Stateful")


def _documented_operations() -> int:
    text = SPEC.read_text(encoding="utf-8")
    return len(re.findall(r"^    (?:get|put|post|delete|patch):$", text, flags=re.MULTILINE))


@pytest.mark.slow
@pytest.mark.timeout(RUN_TIMEOUT + 60)
def test_the_served_api_keeps_its_documented_contract(
    start_iris: Callable[..., IrisServer], tmp_path: Path
) -> None:
    # /escalate without a `channel` needs IRIS_ESCALATION_CHANNEL (the document says so).
    server = start_iris(IRIS_ESCALATION_CHANNEL="ops-escalations")
    env = clean_environment(
        IRIS_URL=server.url,
        IRIS_API_TOKEN=server.token,
        SCHEMATHESIS_HOOKS=str(HERE / "schemathesis_hooks.py"),
    )
    config = HERE / "schemathesis.toml"
    command = [sys.executable, "-m", "schemathesis.cli", "--config-file", str(config), "--no-color"]
    done = subprocess.run(
        [*command, "run", str(SPEC)],
        cwd=tmp_path,  # its cache folder (.schemathesis/) goes here, not into the checkout
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )
    report = done.stdout + done.stderr
    print(report)  # the figures (operations, test cases, phases, time), shown with -s or -rA
    assert done.returncode == 0, report[-20_000:]
    tested = re.search(r"^\s*Tested: (\d+)$", report, flags=re.MULTILINE)
    assert tested and int(tested.group(1)) == _documented_operations(), report[-5_000:]
    for phase in PHASES:  # each phase ran and passed (a skipped phase would test nothing)
        assert re.search(rf"^\s*✅ {phase}$", report, flags=re.MULTILINE), (phase, report[-5_000:])
    assert server.process is not None and server.process.poll() is None, server.log_tail()

"""A sandboxed command never sees Iris's own API token: it gets a short-lived one that reads
only the secrets the agent's skills declare, revoked when the run ends (namespace:net, so the
command can reach the API on loopback)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from iris_runtime.testing.server import IrisServer
from tests.sandbox.support import require_tools, scripted

SKILL = "---\nname: feeds\ndescription: Read the feeds.\nsecrets: [FEED_KEY]\n---\nUse FEED_KEY.\n"
COMMAND = r"""
ask() { curl -s -o "$2" -w '%{http_code}' -H "Authorization: Bearer $IRIS_API_TOKEN" \
  "$IRIS_SECRET_BROKER_URL/secrets/$1"; }
echo "feed=$(ask FEED_KEY feed.json)" > codes.txt
echo "other=$(ask OTHER_KEY /dev/null)" >> codes.txt
printf %s "$IRIS_API_TOKEN" > token.txt
"""


def test_a_run_token_reads_only_the_skills_secrets_and_dies_with_the_run(
    unprivileged: tuple[Callable[..., IrisServer], Path],
) -> None:
    require_tools("bwrap", "curl")
    start_iris, tmp_path = unprivileged  # namespace refuses to run as root
    data_dir = tmp_path / "data"
    (data_dir / "skills" / "feeds").mkdir(parents=True)
    (data_dir / "skills" / "feeds" / "SKILL.md").write_text(SKILL)
    turns = [[{"tool": "bash", "args": {"command": COMMAND}}], [{"text": "done"}]]
    iris = scripted(start_iris, tmp_path, turns, IRIS_SANDBOX="namespace:net")
    for name, value in (("FEED_KEY", "feed-value-1"), ("OTHER_KEY", "other-value-2")):
        put = iris.request("PUT", f"/secrets/{name}", json_body={"value": value})
        assert put.status == 200, put.body
    assert iris.post("/sessions/t/message", json_body={"text": "go"}).json()["text"] == "done"
    work = data_dir / "work"
    codes = dict(line.split("=") for line in (work / "codes.txt").read_text().splitlines())
    assert codes == {"feed": "200", "other": "403"}
    assert json.loads((work / "feed.json").read_text())["value"] == "feed-value-1"
    run_token = (work / "token.txt").read_text()
    assert run_token and run_token != iris.token
    # Revoked with the run: the same token is refused now.
    after = iris.request(
        "GET", "/secrets/FEED_KEY", headers={"Authorization": f"Bearer {run_token}"}, auth=False
    )
    assert after.status == 401
    audit = (data_dir / "audit" / "secrets.jsonl").read_text()
    assert "sandbox-run:" in audit and "feed-value-1" not in audit

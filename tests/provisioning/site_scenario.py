"""What the site converges bring besides the inventory (one host: ``ansible_site/``; a fleet:
``test_ansible_fleet.py``): the ``weather`` agent's workspace skill, which declares one secret,
and the scripted model's rules, by which the agent reads its secret and one it was not given
and Iris's own model spawns, removes and questions agents."""

from __future__ import annotations

import json
from pathlib import Path

from tests.provisioning.nspawn import NspawnHost

AGENT = "weather"
SKILL = "weather-report"
ALLOWED_SECRET = "WEATHER_API_KEY"
OTHER_SECRET = "BILLING_API_KEY"
DATA = Path("/iris/data")  # the role's default data dir, inside the container
SCRIPT = Path("/etc/iris-test/script.json")  # readable by Iris and by the agent user
SKILL_MD = f"""---
name: {SKILL}
description: Report the weather from the weather service.
secrets: [{ALLOWED_SECRET}]
---
Use `get-secret {ALLOWED_SECRET}` for the weather service's key.
"""
# The agent's scripted model runs get-secret for its own secret and for one it was not given.
RULES = [
    {
        "when": "read your secrets",
        "turns": [
            [
                {
                    "tool": "bash",
                    "args": {
                        "command": f"get-secret --no-newline {ALLOWED_SECRET} | sha256sum | "
                        f"cut -d' ' -f1 > secret.sha; get-secret {OTHER_SECRET} >/dev/null 2>&1; "
                        "echo $? > other.rc"
                    },
                }
            ],
            [{"text": "done reading"}],
        ],
    },
    # Iris's own model, told to spawn or remove an agent, does what the spawn-agent skill says.
    {
        "when": "spawn chatty",
        "turns": [
            [
                {
                    "tool": "bash",
                    "args": {
                        "command": 'cd "${IRIS_REPO_DIR:-/iris/repo}" && iris agents spawn chatty '
                        "--json > $OLDPWD/spawn.json 2> $OLDPWD/spawn.err; "
                        "echo $? > $OLDPWD/spawn.rc",
                        "timeout": 240,
                    },
                }
            ],
            [{"text": "spawned chatty"}],
        ],
    },
    {
        "when": "remove chatty",
        "turns": [
            [
                {
                    "tool": "bash",
                    "args": {
                        "command": "iris agents remove chatty > remove.out 2>&1; "
                        "echo $? > remove.rc"
                    },
                }
            ],
            [{"text": "removed chatty"}],
        ],
    },
    {
        "when": "where are you",
        "turns": [
            [{"tool": "bash", "args": {"command": "id -u > uid.txt; hostname > host.txt"}}],
            [{"text": "in my box"}],
        ],
    },
]


def seed_host(host: NspawnHost) -> None:
    """The workspace skill (Iris's own skills live in its data dir) and the model's rules."""
    skill = host.path(DATA / "skills" / SKILL)
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text(SKILL_MD)
    script = host.path(SCRIPT)
    script.parent.mkdir(parents=True)
    script.write_text(json.dumps({"rules": RULES}))
    script.chmod(0o644)

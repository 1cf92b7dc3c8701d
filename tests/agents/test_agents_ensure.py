"""``iris agents ensure`` through the real command, the way a deployment calls it: settings from
``--env-file``, one JSON line on stdout. Process mode (a real Iris supervising its agents) keeps
it fast; the decisions do not depend on the service manager."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import iris_runtime
from iris_runtime.provision.supervised import SupervisedStore
from iris_runtime.testing.server import IrisServer, clean_environment, run_iris

REPO_DIR = Path(iris_runtime.__file__).resolve().parents[1]
SKILL_MD = """---
name: {name}
description: A skill for the ensure tests.
secrets: [{secret}]
---
Nothing to do.
"""
StartIris = Callable[..., IrisServer]


def port_range() -> str:
    first = random.randrange(20000, 30000, 200)
    return f"{first}-{first + 49}"


def write_skills(data: Path) -> None:
    for name, secret in (("digest-feeds", "DIGEST_KEY"), ("notes", "NOTES_KEY")):
        folder = data / "skills" / name
        folder.mkdir(parents=True)
        (folder / "SKILL.md").write_text(SKILL_MD.format(name=name, secret=secret))


def write_env_file(path: Path, env: dict[str, str]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in env.items() if k.startswith("IRIS_")))
    path.chmod(0o600)
    return path


class Ensure:
    """``iris --env-file F agents ensure ...`` with nothing of Iris's in the environment."""

    def __init__(self, env_file: Path) -> None:
        self.env_file = env_file

    def run(self, *args: str) -> tuple[int, str, str]:
        done = run_iris(
            "--env-file",
            str(self.env_file),
            "agents",
            "ensure",
            *args,
            env=clean_environment(),
            timeout=180,
        )
        return done.returncode, done.stdout, done.stderr

    def __call__(self, *args: str) -> dict[str, Any]:
        code, out, err = self.run(*args, "--json")
        assert code == 0, err
        lines = out.splitlines()
        assert len(lines) == 1, out  # the contract: one JSON line, progress on stderr
        result: dict[str, Any] = json.loads(lines[0])
        assert set(result) == {"name", "changed", "action", "differences", "check"}
        return result


def snapshot(data: Path) -> dict[str, object]:
    """Everything ensure could change: the registry, the records, the homes, supervised rows."""
    records = data / "agents" / ".records"
    rows = {}
    if (data / "state.db").exists():
        with SupervisedStore(data) as store:
            rows = {r.name: (r.revision, r.desired) for r in store.all()}
    return {
        "agents.json": (data / "agents.json").read_bytes()
        if (data / "agents.json").exists()
        else None,
        "records": {p.name: p.read_bytes() for p in records.glob("*.json")},
        "homes": sorted(p.name for p in (data / "agents").iterdir())
        if (data / "agents").exists()
        else [],
        "removed": sorted(p.name for p in (data / "agents" / ".removed").iterdir())
        if (data / "agents" / ".removed").exists()
        else [],
        "rows": rows,
    }


def record(data: Path, name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((data / "agents" / ".records" / f"{name}.json").read_text())
    return loaded


@pytest.fixture
def iris(start_iris: StartIris, tmp_path: Path) -> IrisServer:
    data = tmp_path / "iris"
    write_skills(data)
    return start_iris(
        data,
        IRIS_PROVIDER="scripted",
        IRIS_MODEL="parent-model",
        IRIS_REPO_DIR=str(REPO_DIR),
        IRIS_AGENT_PORTS=port_range(),
        IRIS_SERVICE_MANAGER="process",
        IRIS_SUPERVISOR_BACKOFF_MS="200",
    )


@pytest.mark.slow
def test_ensure_converges_and_reports_only_real_changes(iris: IrisServer, tmp_path: Path) -> None:
    ensure = Ensure(write_env_file(tmp_path / "iris.env", iris.environment()))
    data = iris.data_dir

    # --check on a missing agent: would create, creates nothing.
    before = snapshot(data)
    assert ensure("digest", "--skill", "digest-feeds", "--check") == {
        "name": "digest",
        "changed": True,
        "action": "created",
        "differences": [],
        "check": True,
    }
    assert snapshot(data) == before

    created = ensure("digest", "--skill", "digest-feeds")
    assert (created["action"], created["changed"], created["check"]) == ("created", True, False)
    assert record(data, "digest")["skills"] == ["digest-feeds"]
    assert json.loads((data / "agents.json").read_text())["digest"]["secrets"] == ["DIGEST_KEY"]

    # The same declaration again: nothing to do, nothing touched.
    before = snapshot(data)
    again = ensure("digest", "--skill", "digest-feeds")
    assert (again["action"], again["changed"], again["differences"]) == ("unchanged", False, [])
    assert snapshot(data) == before
    # The model given explicitly as what it runs (the default of the day) is no change either.
    assert (
        ensure("digest", "--skill", "digest-feeds", "--model", "parent-model")["changed"] is False
    )

    # Different skills: --check reports the update and changes nothing ...
    wanted = ("--skill", "notes", "--skill", "digest-feeds")
    checked = ensure("digest", *wanted, "--check")
    assert checked["action"] == "updated" and checked["changed"] is True
    assert checked["differences"] == ["skills: digest-feeds -> digest-feeds, notes"]
    assert snapshot(data) == before
    # ... the real run changes the agent in place: its memory, token and port stay, its skills
    # and allow-list are the new ones, nothing is archived, and stderr says why.
    home = data / "agents" / "digest"
    (home / "MEMORY.md").write_text("remember: the feeds moved\n")
    token = (home / "api-token").read_text()
    url = json.loads((data / "agents.json").read_text())["digest"]["bridge_url"]
    code, out, err = ensure.run("digest", *wanted, "--json")
    assert code == 0, err
    assert json.loads(out)["action"] == "updated"
    assert "skills: digest-feeds -> digest-feeds, notes" in err
    assert record(data, "digest")["skills"] == ["notes", "digest-feeds"]
    assert not (data / "agents" / ".removed").exists()
    assert (home / "MEMORY.md").read_text() == "remember: the feeds moved\n"
    assert (home / "api-token").read_text() == token
    assert sorted(p.name for p in (home / "skills").iterdir()) == ["digest-feeds", "notes"]
    entry = json.loads((data / "agents.json").read_text())["digest"]
    assert entry["bridge_url"] == url
    assert sorted(entry["secrets"]) == ["DIGEST_KEY", "NOTES_KEY"]
    # Fewer skills: the allow-list shrinks with them (replaced, not merged).
    fewer = ensure("digest", "--skill", "notes")
    assert fewer["action"] == "updated"
    assert json.loads((data / "agents.json").read_text())["digest"]["secrets"] == ["NOTES_KEY"]
    assert sorted(p.name for p in (home / "skills").iterdir()) == ["notes"]
    assert ensure("digest", *wanted)["action"] == "updated"
    # Skills are a set: another order is the same declaration.
    assert ensure("digest", "--skill", "digest-feeds", "--skill", "notes")["changed"] is False

    # A model of its own is a change; dropping it again is one too (the agent runs another
    # model than the default now gives).
    pinned = ensure("digest", *wanted, "--model", "own-model")
    assert pinned["action"] == "updated"
    assert pinned["differences"] == ["model: parent-model -> own-model"]
    assert record(data, "digest")["model"] == "own-model"
    assert ensure("digest", *wanted, "--model", "own-model")["changed"] is False
    unpinned = ensure("digest", *wanted)
    assert unpinned["differences"] == ["model: own-model -> the default (parent-model)"]
    assert ensure("digest", *wanted)["changed"] is False

    # Reported stopped: started again through the supervisor, and running afterwards.
    with SupervisedStore(data) as store:
        row = store.get("digest")
        assert row is not None and row.state == "running"
        store.report("digest", state="stopped", pid=row.pid, pid_start_time=row.pid_start_time)
    before = snapshot(data)
    assert ensure("digest", *wanted, "--check")["action"] == "started"
    assert snapshot(data) == before
    started = ensure("digest", *wanted)
    assert started["action"] == "started"
    assert started["differences"] == ["process state: stopped"]
    with SupervisedStore(data) as store:
        row = store.get("digest")
    assert row is not None and row.state == "running"
    assert ensure("digest", *wanted)["changed"] is False

    # Absent: --check changes nothing, then it is removed, then there is nothing to do.
    before = snapshot(data)
    assert ensure("digest", "--state", "absent", "--check")["action"] == "removed"
    assert snapshot(data) == before
    removed = ensure("digest", "--state", "absent")
    assert (removed["action"], removed["changed"]) == ("removed", True)
    assert "digest" not in json.loads((data / "agents.json").read_text())
    assert not (data / "agents" / "digest").exists()
    assert not (data / "agents" / ".records" / "digest.json").exists()
    with SupervisedStore(data) as store:
        assert store.get("digest") is None
    before = snapshot(data)
    gone = ensure("digest", "--state", "absent")
    assert (gone["action"], gone["changed"]) == ("absent", False)
    assert snapshot(data) == before


@pytest.mark.slow
def test_an_agent_whose_process_is_gone_is_reinstalled_in_place(
    iris: IrisServer, tmp_path: Path
) -> None:
    """Record and registration intact, process gone: its unit comes back, its home (memory)
    and token stay; nothing is archived."""
    ensure = Ensure(write_env_file(tmp_path / "iris.env", iris.environment()))
    assert ensure("lost")["action"] == "created"
    memory = iris.data_dir / "agents" / "lost" / "MEMORY.md"
    memory.write_text("remember the milk\n")
    token = json.loads((iris.data_dir / "agents.json").read_text())["lost"]["token"]
    with SupervisedStore(iris.data_dir) as store:
        store.set_desired("lost", "absent")  # Iris stops it and forgets the row
        deadline = time.monotonic() + 30
        while store.get("lost") is not None:
            assert time.monotonic() < deadline, "the supervisor did not drop the row"
            time.sleep(0.1)
    repaired = ensure("lost")
    assert repaired["action"] == "updated"
    assert repaired["differences"] == ["not installed in process"]
    assert memory.read_text() == "remember the milk\n"
    assert not (iris.data_dir / "agents" / ".removed").exists()
    assert json.loads((iris.data_dir / "agents.json").read_text())["lost"]["token"] == token
    assert ensure("lost")["changed"] is False


@pytest.mark.slow
def test_a_failed_update_leaves_the_agent_as_it_was(iris: IrisServer, tmp_path: Path) -> None:
    """The new unit fails to install: the old skills and unit come back, and the registry and
    record still describe the agent that runs (the next ensure finds nothing to repair)."""
    from iris_runtime.agents.ensure import Declaration, Ensurer
    from iris_runtime.agents.spawn import Spawner
    from iris_runtime.config import Settings
    from iris_runtime.errors import ProvisionError
    from iris_runtime.provision.launch import AgentLaunch, AgentService, Progress

    env_file = write_env_file(tmp_path / "iris.env", iris.environment())
    ensure = Ensure(env_file)
    assert ensure("digest", "--skill", "digest-feeds")["action"] == "created"
    data = iris.data_dir
    memory = data / "agents" / "digest" / "MEMORY.md"
    memory.write_text("remember the milk\n")
    before_registry = json.loads((data / "agents.json").read_text())["digest"]
    before_record = record(data, "digest")

    class FirstInstallFails:
        """The real service manager, except that the new unit's install fails."""

        def __init__(self, real: AgentService) -> None:
            self.real, self.installs = real, 0

        def install(self, launch: AgentLaunch, progress: Progress) -> None:
            self.installs += 1
            if self.installs == 1:
                raise ProvisionError("the new unit did not start")
            self.real.install(launch, progress)

        def __getattr__(self, name: str) -> Any:
            return getattr(self.real, name)

    lines: list[str] = []
    spawner = Spawner(
        Settings.from_env({k: v for k, v in iris.environment().items() if k.startswith("IRIS_")}),
        progress=lines.append,
    )
    real_service = spawner.service
    spawner.service = lambda manager: FirstInstallFails(real_service(manager))  # type: ignore[method-assign]
    with pytest.raises(ProvisionError, match="did not start"):
        Ensurer(spawner).apply(Declaration("digest", skills=("notes",)))
    assert any("rolled back digest" in line for line in lines), lines

    assert json.loads((data / "agents.json").read_text())["digest"] == before_registry
    assert record(data, "digest") == before_record
    skills = sorted(p.name for p in (data / "agents" / "digest" / "skills").iterdir())
    assert skills == ["digest-feeds"]
    again = ensure("digest", "--skill", "digest-feeds")
    assert (again["action"], again["changed"]) == ("unchanged", False), again
    assert memory.read_text() == "remember the milk\n"


# -- bad input: no Iris needed, nothing may change ------------------------------------------------


@pytest.fixture
def offline(tmp_path: Path) -> tuple[Ensure, Path]:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    write_skills(data)
    env_file = write_env_file(
        tmp_path / "iris.env",
        {
            "IRIS_DATA_DIR": str(data),
            "IRIS_REPO_DIR": str(REPO_DIR),
            "IRIS_SERVICE_MANAGER": "process",
        },
    )
    return Ensure(env_file), data


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("Bad Name",), 1, "invalid agent name"),
        (("--", "-dash"), 1, "invalid agent name"),
        (("iris",), 1, "reserved"),
        (("digest", "--skill", "no-such-skill"), 1, "unknown skill(s): no-such-skill"),
        (("digest", "--state", "gone"), 2, "'gone' is not one of 'present', 'absent'"),
        (("digest", "--mode", "vm"), 2, "'vm' is not one of"),
        (("Bad Name", "--state", "absent"), 1, "invalid agent name"),
        (("digest", "--skill", "no-such-skill", "--check"), 1, "unknown skill(s)"),
    ],
)
def test_bad_input_is_refused_and_changes_nothing(
    offline: tuple[Ensure, Path], args: tuple[str, ...], code: int, message: str
) -> None:
    ensure, data = offline
    before = sorted(p.relative_to(data) for p in data.rglob("*"))
    got, out, err = ensure.run("--json", *args)
    assert got == code, err
    assert message in err
    assert out == "" and "Traceback" not in err
    assert sorted(p.relative_to(data) for p in data.rglob("*")) == before


def test_a_registered_agent_that_was_not_spawned_is_not_taken_over(
    offline: tuple[Ensure, Path],
) -> None:
    ensure, data = offline
    env = clean_environment(IRIS_DATA_DIR=str(data))
    assert (
        run_iris("agents", "register", "manual", "http://127.0.0.1:4999", env=env).returncode == 0
    )
    before = (data / "agents.json").read_bytes()
    for extra in ((), ("--check",)):
        code, _, err = ensure.run("manual", *extra)
        assert code == 1 and "was not spawned by Iris" in err
    assert (data / "agents.json").read_bytes() == before
    # Absent removes it (an unregister is what removing a registered-only agent means).
    assert ensure("manual", "--state", "absent")["action"] == "removed"
    assert "manual" not in json.loads((data / "agents.json").read_text())


def test_check_on_an_empty_data_dir_creates_nothing(offline: tuple[Ensure, Path]) -> None:
    ensure, data = offline
    before = sorted(p.relative_to(data) for p in data.rglob("*"))
    assert ensure("digest", "--skill", "notes", "--check")["action"] == "created"
    assert ensure("digest", "--state", "absent", "--check")["action"] == "absent"
    assert sorted(p.relative_to(data) for p in data.rglob("*")) == before

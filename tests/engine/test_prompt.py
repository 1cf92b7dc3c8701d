"""The system prompt comes only from the transport's profile and the agent's own files, and the
engine never names a platform."""

from __future__ import annotations

import re
from pathlib import Path

import iris_runtime.engine
from iris_runtime.engine.prompt import build_system_prompt
from iris_runtime.engine.skills import discover_skills
from iris_runtime.engine.transport import ChannelInfo, UserInfo
from tests.engine.conftest import PROFILE

PLATFORMS = re.compile(r"slack|telegram|discord|whatsapp", re.IGNORECASE)


def test_engine_sources_name_no_platform() -> None:
    engine_dir = Path(iris_runtime.engine.__file__).parent
    offenders = [
        f"{path.name}:{number}: {line.strip()}"
        for path in sorted(engine_dir.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if PLATFORMS.search(line)
    ]
    assert offenders == []


def test_prompt_is_composed_from_profile_identity_memory_and_skills(tmp_path: Path) -> None:
    (tmp_path / "CONSTITUTION.md").write_text("Be kind and exact.")
    (tmp_path / "MEMORY.md").write_text("The user likes tea.")
    skill = tmp_path / "skills" / "weather"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: weather\ndescription: Look up forecasts\n---\nbody")
    prompt = build_system_prompt(
        PROFILE,
        tmp_path,
        skills=discover_skills(tmp_path, []),
        channels=[ChannelInfo("C1", "general")],
        users=[UserInfo("U1", "ada")],
    )
    for expected in (
        PROFILE.identity_line,
        PROFILE.formatting_section,
        "1 channels, 1 users",
        PROFILE.silent_note,
        PROFILE.attach_note,
        "<rec_attachments>",
        "4000",
        "Be kind and exact.",
        "The user likes tea.",
        "weather: Look up forecasts",
    ):
        assert expected in prompt


def test_missing_identity_files_are_simply_absent(tmp_path: Path) -> None:
    prompt = build_system_prompt(PROFILE, tmp_path, skills=[], channels=[], users=[])
    assert "Constitution" not in prompt and "No skills are installed." in prompt

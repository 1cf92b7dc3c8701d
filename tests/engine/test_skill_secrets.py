"""Skills declare the secrets their scripts fetch (``secrets:`` in SKILL.md frontmatter), so an
agent can be given exactly that allow-list; flat name/description frontmatter keeps working."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from iris_runtime.engine.skills import discover_skills, load_skill, secrets_for_skills

SKILLS_LOGGER = "iris_runtime.engine.skills"


def make_skill(root: Path, folder: str, frontmatter: str, body: str = "Body.\n") -> Path:
    path = root / "skills" / folder
    path.mkdir(parents=True)
    (path / "SKILL.md").write_text(f"---\n{frontmatter}---\n{body}", encoding="utf-8")
    return path


def warnings_from(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == SKILLS_LOGGER and record.levelno == logging.WARNING
    ]


@pytest.mark.parametrize(
    "declaration",
    [
        "secrets: [SENDGRID_API_KEY, ANTHROPIC-API-KEY, db.password]\n",
        "secrets:\n  - SENDGRID_API_KEY\n  - ANTHROPIC-API-KEY\n  - db.password\n",
        "secrets:\n- SENDGRID_API_KEY\n- 'ANTHROPIC-API-KEY'\n- \"db.password\"\n",
    ],
    ids=["inline", "block", "block-unindented-quoted"],
)
def test_secrets_are_read_inline_or_as_a_block_list(
    tmp_path: Path, declaration: str, caplog: pytest.LogCaptureFixture
) -> None:
    folder = make_skill(tmp_path, "mail", f"name: mail\ndescription: Send mail\n{declaration}")

    skill = load_skill(folder)

    assert skill is not None
    assert skill.secrets == ("SENDGRID_API_KEY", "ANTHROPIC-API-KEY", "db.password")
    assert (skill.name, skill.description) == ("mail", "Send mail")
    assert warnings_from(caplog) == []


def test_a_skill_without_secrets_declares_none(tmp_path: Path) -> None:
    skill = load_skill(make_skill(tmp_path, "plain", "name: plain\ndescription: Nothing\n"))
    assert skill is not None and skill.secrets == ()


@pytest.mark.parametrize(
    "declaration",
    ["secrets:\n", "secrets: []\n", "secrets: ~\n"],
    ids=["blank", "empty-list", "null"],
)
def test_an_empty_declaration_is_no_secrets_and_no_warning(
    tmp_path: Path, declaration: str, caplog: pytest.LogCaptureFixture
) -> None:
    skill = load_skill(make_skill(tmp_path, "empty", f"name: empty\n{declaration}"))
    assert skill is not None and skill.secrets == ()
    assert warnings_from(caplog) == []


def test_invalid_entries_are_dropped_with_a_warning_naming_skill_and_entry(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    declaration = (
        "secrets:\n  - GOOD_ONE\n  - has space\n  - 42\n  - {nested: map}\n"
        "  - ../etc/passwd\n  - GOOD.two\n  - GOOD_ONE\n"
    )
    folder = make_skill(tmp_path, "mixed", f"name: mixed-skill\n{declaration}")

    skill = load_skill(folder)

    assert skill is not None
    assert skill.secrets == ("GOOD_ONE", "GOOD.two")  # a repeated name counts once
    [warning] = warnings_from(caplog)
    assert "'mixed-skill'" in warning
    for shown in ("'has space'", "42", "a dict", "'../etc/passwd'"):
        assert shown in warning
    assert "GOOD_ONE" not in warning and "GOOD.two" not in warning


@pytest.mark.parametrize(
    ("declaration", "shown"),
    [
        ("secrets: SENDGRID_API_KEY\n", "'SENDGRID_API_KEY'"),
        ("secrets: {A: B}\n", "a dict"),
        ("secrets: 7\n", "7"),
    ],
)
def test_a_declaration_that_is_not_a_list_gives_no_secrets_and_a_warning(
    tmp_path: Path, declaration: str, shown: str, caplog: pytest.LogCaptureFixture
) -> None:
    skill = load_skill(
        make_skill(tmp_path, "odd", f"name: odd\ndescription: Still loads\n{declaration}")
    )

    assert skill is not None and skill.description == "Still loads"
    assert skill.secrets == ()
    [warning] = warnings_from(caplog)
    assert "'odd'" in warning and "must be a list" in warning and shown in warning


def test_an_unparseable_secrets_line_is_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    skill = load_skill(make_skill(tmp_path, "broken", "name: broken\nsecrets: [A, B\n"))

    assert skill is not None and skill.name == "broken" and skill.secrets == ()
    [warning] = warnings_from(caplog)
    assert "'broken'" in warning and "not valid YAML" in warning


def test_a_hostile_entry_cannot_flood_or_forge_the_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    entries = "".join(f"  - 'bad name {i}\\nFAKE LOG LINE {'x' * 500}'\n" for i in range(50))
    skill = load_skill(make_skill(tmp_path, "hostile", f"name: hostile\nsecrets:\n{entries}"))

    assert skill is not None and skill.secrets == ()
    [warning] = warnings_from(caplog)
    assert "\n" not in warning  # the newline is escaped, not written
    assert "and 45 more" in warning
    assert len(warning) < 1000


def test_flat_descriptions_that_are_not_yaml_keep_their_meaning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Frontmatter written as flat lines stays readable, and its secrets still count."""
    cases = {
        "hash": ("Posts to #general: daily", "Posts to #general: daily"),
        "star": ("*bold* claims, checked", "*bold* claims, checked"),
        "quoted": ('"Quoted text"', "Quoted text"),
        "backtick": ("`make` wrapper", "`make` wrapper"),
    }
    for folder, (written, _) in cases.items():
        make_skill(
            tmp_path,
            folder,
            f"name: {folder}\ndescription: {written}\nsecrets: [{folder.upper()}_KEY]\n",
        )

    skills = {skill.name: skill for skill in discover_skills(tmp_path, [])}

    for folder, (_, meant) in cases.items():
        assert skills[folder].description == meant
        assert skills[folder].secrets == (f"{folder.upper()}_KEY",)
    assert warnings_from(caplog) == []


def test_a_description_continued_on_the_next_lines_is_read_as_yaml(tmp_path: Path) -> None:
    frontmatter = "name: long\ndescription: >\n  First line\n  second line.\nsecrets: [K]\n"
    skill = load_skill(make_skill(tmp_path, "long", frontmatter))
    assert skill is not None
    assert skill.description == "First line second line."
    assert skill.secrets == ("K",)


def test_the_size_cap_still_applies(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    folder = make_skill(tmp_path, "huge", "name: huge\nsecrets: [K]\n", body="x" * 65 * 1024)
    assert load_skill(folder) is None
    assert any("larger than 64 KiB" in message for message in warnings_from(caplog))


def test_secrets_for_skills_is_the_ordered_union(tmp_path: Path) -> None:
    mail = make_skill(tmp_path, "mail", "name: mail\nsecrets: [SENDGRID_API_KEY, SHARED]\n")
    make_skill(tmp_path, "db", "name: db\nsecrets:\n  - DB_URL\n  - SHARED\n  - SENDGRID_API_KEY\n")
    none = make_skill(tmp_path, "none", "name: none\ndescription: no secrets\n")
    db = load_skill(tmp_path / "skills" / "db")
    assert db is not None

    union = secrets_for_skills([mail, none, db, tmp_path / "skills" / "mail" / "SKILL.md"])

    assert union == ["SENDGRID_API_KEY", "SHARED", "DB_URL"]
    assert secrets_for_skills([]) == []


def test_secrets_for_skills_skips_what_does_not_load(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    mail = make_skill(tmp_path, "mail", "name: mail\nsecrets: [MAIL_KEY]\n")

    assert secrets_for_skills([tmp_path / "no-such-skill", mail]) == ["MAIL_KEY"]
    assert any("no-such-skill" in message for message in warnings_from(caplog))

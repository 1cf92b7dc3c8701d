"""A spawned agent's home: its data dir with CONSTITUTION.md, MEMORY.md, skills/ and api-token.

Scaffold files come from ``<IRIS_REPO_DIR>/agents/scaffold``. Each is rendered in one pass from
the source to the destination (one substitution over the whole text, then an atomic write), never
by editing the destination in place step by step: two edits of one file can interleave with a
concurrent writer and leave a placeholder behind.

``<agents dir>/.records/<name>.json`` records how the agent was spawned (mode, service manager,
ports, skills), which is what ``iris agents remove`` reads to undo it. It is kept outside the
home on purpose: the agent owns its home and could rewrite anything in it.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from iris_runtime.config import TOKEN_FILE_NAME
from iris_runtime.data_layout import CONSTITUTION_MD, MEMORY_MD, SKILLS_DIR
from iris_runtime.engine.skills import Skill
from iris_runtime.errors import ConfigError, InvalidInput, IrisError
from iris_runtime.private_files import (
    adopt_parent_owner,
    adopt_parent_owner_tree,
    private_dir,
    write_private_file,
)

SCAFFOLD_DIR = Path("agents") / "scaffold"
RECORDS_DIR = ".records"
REMOVED_DIR = ".removed"
PLACEHOLDER_RE = re.compile(r"\{\{([A-Z_]+)\}\}")
MAX_CONSTITUTION_BYTES = 256 * 1024
SAFE_FOLDER_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


class HomeExists(IrisError):
    code = "agent_home_exists"
    status = 409


@dataclass(frozen=True)
class AgentRecord:
    """How an agent was spawned (see the module docstring for where it is kept)."""

    name: str
    mode: str  # "service" | "docker"
    manager: str  # "systemd" | "process" | "docker"
    bridge_port: int
    api_port: int
    skills: tuple[str, ...]
    provider: str
    model: str  # as resolved at spawn
    created: str
    # What the spawn was asked for, so `iris agents ensure` compares declarations: the model
    # given (None: the default of the day) and --unique-token. Absent from older records.
    requested_model: str | None = None
    unique_token: bool = False
    sandbox: str = "host"  # IRIS_SANDBOX of the agent's own bash and file tools
    # The spawn's --env settings (plain, non-secret), so an update in place keeps them.
    extra_env: tuple[tuple[str, str], ...] = ()

    def write(self, agents_dir: Path) -> None:
        data = json.dumps(asdict(self), indent=2) + "\n"
        path = record_path(agents_dir, self.name)
        private_dir(path.parent)
        write_private_file(path, data.encode("utf-8"))

    @classmethod
    def read(cls, agents_dir: Path, name: str) -> AgentRecord | None:
        path = record_path(agents_dir, name)
        try:
            return cls.from_json(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, TypeError) as exc:
            raise ConfigError(f"{path} is unreadable: {exc}") from None

    @classmethod
    def from_json(cls, text: str) -> AgentRecord:
        """A record as :meth:`write` stored it; ValueError, TypeError or AttributeError when
        the text is not one."""
        raw = json.loads(text)
        raw["skills"] = tuple(raw.get("skills", ()))
        raw["extra_env"] = tuple((str(k), str(v)) for k, v in raw.get("extra_env", ()))
        return cls(**raw)


def record_path(agents_dir: Path, name: str) -> Path:
    return agents_dir / RECORDS_DIR / f"{name}.json"


def delete_record(agents_dir: Path, name: str) -> None:
    record_path(agents_dir, name).unlink(missing_ok=True)


def render_placeholders(text: str, values: Mapping[str, str]) -> str:
    """Every ``{{NAME}}`` with a value replaced in a single pass; unknown ones are kept as they
    are (a constitution may legitimately mention braces)."""
    return PLACEHOLDER_RE.sub(lambda m: values.get(m.group(1), m.group(0)), text)


def render_file(source: Path, destination: Path, values: Mapping[str, str]) -> None:
    """Render ``source`` into ``destination`` (0600, atomic)."""
    try:
        if source.stat().st_size > MAX_CONSTITUTION_BYTES:
            raise InvalidInput(f"{source} is larger than {MAX_CONSTITUTION_BYTES // 1024} KiB")
        text = source.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"cannot read {source}: {exc}") from None
    write_private_file(destination, render_placeholders(text, values).encode("utf-8"))


def scaffold_dir(repo_dir: Path) -> Path:
    folder = repo_dir / SCAFFOLD_DIR
    if not (folder / CONSTITUTION_MD).is_file():
        raise ConfigError(
            f"no agent scaffold at {folder}: set IRIS_REPO_DIR to your Iris checkout "
            f"(now {repo_dir})"
        )
    return folder


def skills_list(skills: Sequence[Skill]) -> str:
    if not skills:
        return "- none yet"
    return "\n".join(f"- `{s.name}`: {s.description or 'no description'}" for s in skills)


def create_home(
    home: Path,
    *,
    repo_dir: Path,
    values: Mapping[str, str],
    skills: Sequence[Skill],
    token: str | None,
    constitution: Path | None = None,
) -> None:
    """Create ``home`` with its scaffold, its skills and (when given) its API token file.
    Refuses a home that already exists: it may hold another agent's memory."""
    scaffold = scaffold_dir(repo_dir)
    private_dir(home.parent)
    try:
        home.mkdir(mode=0o700)
    except FileExistsError:
        raise HomeExists(
            f"{home} already exists (a previous agent's home?): move it away or run "
            f"`iris agents remove {home.name}`"
        ) from None
    try:
        adopt_parent_owner(home)  # a root-run spawn leaves the home to the agents dir's owner
        _fill_home(home, scaffold, values, skills, token, constitution)
    except BaseException:
        delete_home(home)  # created here, so removed here: never a half-made home
        raise


def _fill_home(
    home: Path,
    scaffold: Path,
    values: Mapping[str, str],
    skills: Sequence[Skill],
    token: str | None,
    constitution: Path | None,
) -> None:
    render_file(constitution or scaffold / CONSTITUTION_MD, home / CONSTITUTION_MD, values)
    render_file(scaffold / MEMORY_MD, home / MEMORY_MD, values)
    _copy_skills(private_dir(home / SKILLS_DIR), skills)
    if token is not None:
        write_private_file(home / TOKEN_FILE_NAME, (token + "\n").encode("utf-8"))


def replace_skills(home: Path, skills: Sequence[Skill]) -> None:
    """The home's ``skills/`` becomes exactly ``skills``, everything else in the home (its
    memory, constitution, token, work) untouched. The new set is copied beside the old one and
    swapped in by renames, so a failed copy leaves the old skills in place."""
    fresh = home / f".{SKILLS_DIR}.new"
    shutil.rmtree(fresh, ignore_errors=True)
    try:
        _copy_skills(private_dir(fresh), skills)  # made with the home's owner, as create_home
    except BaseException:
        shutil.rmtree(fresh, ignore_errors=True)
        raise
    current, old = home / SKILLS_DIR, home / f".{SKILLS_DIR}.old"
    shutil.rmtree(old, ignore_errors=True)
    if current.exists():
        current.rename(old)
    fresh.rename(current)
    shutil.rmtree(old, ignore_errors=True)


def _copy_skills(skills_dir: Path, skills: Sequence[Skill]) -> None:
    for skill in skills:
        _refuse_escaping_links(skill)
        try:
            shutil.copytree(
                skill.path,
                skills_dir / _folder_name(skill),
                symlinks=True,
                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
            )
            adopt_parent_owner_tree(skills_dir / _folder_name(skill))
        except (OSError, shutil.Error) as exc:
            raise ConfigError(
                f"cannot copy skill {skill.name!r} from {skill.path}: {exc}"
            ) from None


def _refuse_escaping_links(skill: Skill) -> None:
    """A skill's symlinks may point within the skill only: one to Iris's data dir would hand
    the agent a copy of (or a way to) files it must not see."""
    root = skill.path.resolve()
    for path in skill.path.rglob("*"):
        if path.is_symlink() and not path.resolve().is_relative_to(root):
            raise InvalidInput(
                f"skill {skill.name!r}: {path} links outside the skill ({path.resolve()}); "
                "copy the file into the skill instead"
            )


def _folder_name(skill: Skill) -> str:
    """The skill's folder in the agent's home: its name when that is a plain file name (plugin
    skills often live in a folder called ``skill``), else the folder it came from."""
    return skill.name if SAFE_FOLDER_RE.fullmatch(skill.name) else skill.path.name


def archive_home(home: Path) -> Path | None:
    """Move ``home`` to ``<agents dir>/.removed/<name>-<time>``: a removed agent's memory and
    logs are kept until someone deletes them. None when there was no home."""
    if not home.exists():
        return None
    removed = private_dir(home.parent / REMOVED_DIR)
    target = removed / f"{home.name}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    suffix = 0
    while target.exists():
        suffix += 1
        target = target.with_name(f"{target.name.split('.')[0]}.{suffix}")
    try:
        home.rename(target)
    except FileNotFoundError:
        return None  # a concurrent remove archived it first
    return target


def delete_home(home: Path) -> None:
    shutil.rmtree(home, ignore_errors=True)

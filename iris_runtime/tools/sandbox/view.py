"""The workspace a sandboxed command sees, and the same view for the file tools.

At ``host`` the workspace is the data dir, as it always was. At every other level the command
sees a work folder (``<data dir>/work``) as ``/workspace`` and, read-only under ``/agent``, the
agent's ``CONSTITUTION.md``, ``MEMORY.md`` and ``skills/``: never Iris's token, registry,
database, secret store, audit log or sockets. ``read``, ``write``, ``edit`` and ``attach`` take
the same paths the command uses (relative, ``/workspace/...``, ``/agent/...``) and reach exactly
those files on the host, with traversal refused.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

from iris_runtime import data_layout
from iris_runtime.errors import InvalidInput
from iris_runtime.tools.sandbox.base import (
    INSIDE_AGENT,
    INSIDE_WORKSPACE,
    Mount,
    WorkspaceView,
)
from iris_runtime.tools.workspace import confine, parent_folder

# Where Iris puts what the command must reach at an isolated level (the user's attachments, the
# bash tool's saved full output): inside the work folder, the only folder it sees writable.
VIEW_ATTACHMENTS = ".iris/attachments"

IDENTITY = (data_layout.CONSTITUTION_MD, data_layout.MEMORY_MD, data_layout.SKILLS_DIR)


def host_view(workspace: Path) -> WorkspaceView:
    return WorkspaceView(Mount(workspace, str(workspace), writable=True))


def work_folder(data_dir: Path) -> Path:
    return data_dir / data_layout.WORK_DIR


def ensure_work_folder(view: WorkspaceView, owner: int | None = None) -> None:
    """Create the work folder private (once the data dir exists: ``iris doctor`` creates
    nothing), owned by ``owner``: the uid the level's commands write as on the host (10000 for
    gVisor and Docker; Iris's own, the default, where a user namespace maps 10000 to it).

    After a switch of level the whole tree changes hands, so the commands can still write what
    the previous level's commands made. Only root can; otherwise it is left as it is."""
    folder = view.root.host
    if not folder.parent.is_dir():
        return
    folder.mkdir(mode=0o700, exist_ok=True)
    uid = os.geteuid() if owner is None else owner
    if os.geteuid() == 0 and folder.stat().st_uid != uid:
        for path in (folder, *folder.rglob("*")):
            os.lchown(path, uid, uid)


def sandboxed_view(data_dir: Path, work: Path) -> WorkspaceView:
    extras = tuple(
        Mount(data_dir / name, f"{INSIDE_AGENT}/{name}", writable=False) for name in IDENTITY
    )
    return WorkspaceView(Mount(work, INSIDE_WORKSPACE, writable=True), extras)


def present(mounts: tuple[Mount, ...]) -> tuple[Mount, ...]:
    """The mounts whose host side exists now (a missing MEMORY.md is simply not shown)."""
    return tuple(m for m in mounts if m.host.exists())


def resolve(view: WorkspaceView, user_path: str, *, write: bool) -> Path:
    """The host path a command in the sandbox would reach as ``user_path``.

    Raises InvalidInput for a path outside the view, and for a write to a read-only part."""
    return locate(view, user_path, write=write)[1]


def locate(view: WorkspaceView, user_path: str, *, write: bool) -> tuple[Path, Path]:
    """Like ``resolve``, with the folder the path is confined to: open it with
    ``workspace.read_confined``/``write_confined`` (no symlink followed after the check)."""
    if "\0" in user_path:
        raise InvalidInput("path contains a NUL byte", code="outside_workspace")
    root = view.root
    if not user_path.startswith("/") or root.inside == str(root.host):
        return root.host, confine(root.host, user_path)  # relative, or the host level's paths
    inside = PurePosixPath(os.path.normpath(user_path))
    for mount in view.mounts:
        mount_point = PurePosixPath(mount.inside)
        if inside == mount_point or inside.is_relative_to(mount_point):
            if write and not mount.writable:
                raise InvalidInput(f"{user_path} is read-only here", code="read_only")
            relative = str(inside.relative_to(mount_point))
            return _confine_mount(mount, relative)
    raise InvalidInput(
        f"path {user_path[:200]!r} is outside the workspace {root.inside}", code="outside_workspace"
    )


def _confine_mount(mount: Mount, relative: str) -> tuple[Path, Path]:
    if mount.host.is_dir() or relative != ".":
        return mount.host, confine(mount.host, relative)
    folder = mount.host.parent  # a single bound file (CONSTITUTION.md)
    return folder, folder.resolve() / mount.host.name


def to_inside(view: WorkspaceView, host_path: Path) -> str:
    """How the command sees a host path of the view (for messages), else the host path."""
    for mount in view.mounts:
        try:
            relative = host_path.relative_to(mount.host.resolve())
        except ValueError:
            continue
        return str(PurePosixPath(mount.inside) / relative) if str(relative) != "." else mount.inside
    return str(host_path)


def prompt_section(level: str, view: WorkspaceView) -> str:
    """What the model needs to know about paths at a sandboxed level."""
    shown = ", ".join(m.inside for m in view.extras) or "nothing else"
    return (
        f"## Sandbox\nYour commands run in the {level} sandbox. There your workspace is "
        f"{view.root.inside} (writable) beside {shown} (read-only); the host paths named "
        "above do not exist there. The read, write, edit and attach tools take the same paths."
    )


def mirror_into_view(view: WorkspaceView, data_dir: Path, local: str) -> str:
    """Copy the data dir's ``local`` (an attachment's handle) into the work folder under
    ``.iris/attachments/<local>``, written without following a symlink the command may have
    planted, and return its path as the command (and the file tools) see it."""
    source = confine(data_dir, local)
    work = view.root.host
    relative = f"{VIEW_ATTACHMENTS}/{source.relative_to(data_dir.resolve())}"
    target = work.resolve() / relative
    with parent_folder(work, target, relative, create=True) as (folder, name):
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(name, flags, 0o644, dir_fd=folder)
        with os.fdopen(fd, "wb") as out, source.open("rb") as data:
            shutil.copyfileobj(data, out)
    return f"{view.root.inside}/{relative}"


def attachment_shower(sandbox: Any, data_dir: Path) -> Callable[[str], str] | None:
    """For the engine: at an isolated level, an attachment handle -> its copy in the view."""
    view = getattr(sandbox, "view", None)
    if view is None or not getattr(sandbox, "isolated", False):
        return None
    return lambda local: mirror_into_view(view, data_dir, local)

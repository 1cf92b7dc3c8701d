#!/usr/bin/env python3
"""Pack files from a directory into a deterministic tar (runs on the Ansible controller).

The same inputs always give the same bytes: members sorted, owner root, mtime fixed, modes
normalised (0755 for directories and executables, 0644 otherwise). The role compares the tar's
checksum with the one recorded at the last install, so an unchanged checkout installs nothing.

Usage: pack.py OUTPUT ROOT PATH... [--suffix .whl] [--no-git]
PATH is a file or directory relative to ROOT; a missing optional PATH ends with "?".

When ROOT is in a git checkout, only the files git knows or would add (tracked, and untracked
ones .gitignore does not exclude) are candidates, so a developer's local credentials and state
stay on the controller; --no-git (or no git) walks the directories instead. Either way these are
skipped: __pycache__, *.pyc, *.egg-info, build/, dist/, .git/, .terraform/, Terraform state and
variable files (terraform.tfstate*, *.tfvars, *.tfvars.json), keys and certificates (*.pem,
*.key), env files (.env, .env.*, *.env), and tests/ folders below plugins/ (the unit tests are
not part of a deployment).
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

# 2020-01-01: a wheel (a zip file) cannot hold timestamps before 1980, and pip builds the
# packages' wheels from these files.
MTIME = 1577836800
SKIP_DIRS = {"__pycache__", "build", "dist", ".terraform", ".git", ".pytest_cache"}
# Build leftovers, and what must never leave the controller: Terraform state and variables
# (they hold credentials), private keys and certificates, env files.
SKIP_SUFFIXES = (
    ".pyc",
    ".pyo",
    ".tfstate",
    ".tfstate.backup",
    ".tfvars",
    ".tfvars.json",
    ".pem",
    ".key",
    ".env",
)


def _skipped(relative: Path) -> bool:
    parts = relative.parts
    if any(part in SKIP_DIRS or part.endswith(".egg-info") for part in parts):
        return True
    if parts[:1] == ("plugins",) and "tests" in parts[2:]:
        return True
    name = relative.name
    if name.startswith(("terraform.tfstate", ".env")):
        return True
    return name.endswith(SKIP_SUFFIXES)


def _git_files(root: Path, paths: list[str]) -> set[Path] | None:
    """The files git tracks or would add under ``paths`` (relative to ``root``), or None when
    ``root`` is not in a git checkout (or git is missing or refuses the directory)."""
    try:
        done = subprocess.run(
            [
                "git",
                "-C",
                str(root),
                "ls-files",
                "-z",
                "--cached",
                "--others",
                "--exclude-standard",
                "--",
                *(p.rstrip("?") for p in paths),
            ],
            capture_output=True,
            check=False,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return {Path(name) for name in done.stdout.decode().split("\0") if name}


def _members(root: Path, paths: list[str], suffix: str | None, use_git: bool) -> list[Path]:
    found: set[Path] = set()
    known = _git_files(root, paths) if use_git else None
    for raw in paths:
        optional = raw.endswith("?")
        relative = Path(raw.rstrip("?"))
        start = root / relative
        if not start.exists():
            if optional:
                continue
            sys.exit(f"pack.py: {start} does not exist")
        if known is not None:
            # Deleted but still tracked files are not in the working tree: left out.
            candidates = [
                root / name
                for name in known
                if (name == relative or relative in name.parents or relative == Path("."))
                and (root / name).is_file()
            ]
        else:
            candidates = (
                [start] if start.is_file() else [p for p in start.rglob("*") if p.is_file()]
            )
        for path in candidates:
            rel = path.relative_to(root)
            if _skipped(rel) or (suffix and not path.name.endswith(suffix)):
                continue
            found.add(rel)
    return sorted(found)


def _info(
    name: str, *, directory: bool, size: int = 0, executable: bool = False
) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE if directory else tarfile.REGTYPE
    info.mode = 0o755 if directory or executable else 0o644
    info.size = size
    info.mtime = MTIME
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("output", type=Path)
    parser.add_argument("root", type=Path)
    parser.add_argument("paths", nargs="+")
    parser.add_argument("--suffix")
    parser.add_argument("--no-git", action="store_true", help="walk the directories only")
    args = parser.parse_args()
    members = _members(args.root.resolve(), args.paths, args.suffix, not args.no_git)
    if not members:
        sys.exit(f"pack.py: nothing to pack under {args.root}")
    directories = sorted(
        {str(parent) for m in members for parent in m.parents if str(parent) != "."}
    )
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for directory in directories:
            tar.addfile(_info(directory, directory=True))
        for member in members:
            path = args.root / member
            data = path.read_bytes()
            executable = bool(path.stat().st_mode & 0o100)
            tar.addfile(
                _info(str(member), directory=False, size=len(data), executable=executable),
                io.BytesIO(data),
            )
    tmp = args.output.with_name(args.output.name + ".tmp")
    tmp.write_bytes(buffer.getvalue())
    os.replace(tmp, args.output)


if __name__ == "__main__":
    main()

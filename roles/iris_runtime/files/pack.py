#!/usr/bin/env python3
"""Pack files from a directory into a deterministic tar (runs on the Ansible controller).

The same inputs always give the same bytes: members sorted, owner root, mtime fixed, modes
normalised (0755 for directories and executables, 0644 otherwise). The role compares the tar's
checksum with the one recorded at the last install, so an unchanged checkout installs nothing.

Usage: pack.py OUTPUT ROOT PATH... [--suffix .whl]
PATH is a file or directory relative to ROOT; a missing optional PATH ends with "?".
Skipped everywhere: __pycache__, *.pyc, *.egg-info, build/, dist/, .terraform/, Terraform state,
and tests/ folders below plugins/ (the unit tests are not part of a deployment).
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tarfile
from pathlib import Path

# 2020-01-01: a wheel (a zip file) cannot hold timestamps before 1980, and pip builds the
# packages' wheels from these files.
MTIME = 1577836800
SKIP_DIRS = {"__pycache__", "build", "dist", ".terraform", ".git", ".pytest_cache"}
SKIP_SUFFIXES = (".pyc", ".pyo", ".tfstate", ".tfstate.backup")


def _skipped(relative: Path) -> bool:
    parts = relative.parts
    if any(part in SKIP_DIRS or part.endswith(".egg-info") for part in parts):
        return True
    if parts[:1] == ("plugins",) and "tests" in parts[2:]:
        return True
    return relative.name.endswith(SKIP_SUFFIXES)


def _members(root: Path, paths: list[str], suffix: str | None) -> list[Path]:
    found: set[Path] = set()
    for raw in paths:
        optional = raw.endswith("?")
        relative = Path(raw.rstrip("?"))
        start = root / relative
        if not start.exists():
            if optional:
                continue
            sys.exit(f"pack.py: {start} does not exist")
        candidates = [start] if start.is_file() else [p for p in start.rglob("*") if p.is_file()]
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
    args = parser.parse_args()
    members = _members(args.root.resolve(), args.paths, args.suffix)
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

"""A tiny image for the docker level's tests, made from this host's own programs.

Nothing is pulled: the programs the tests run (bash, coreutils, ip, grep, ...) and the shared
libraries ``ldd`` names for them are put in a tar at their own paths, with the host's top-level
symlinks (merged /usr), and ``docker import``-ed. A container of it sleeps until removed.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

PROGRAMS = (
    "bash", "sh", "id", "hostname", "ip", "cut", "tr", "cat", "touch", "sleep", "grep",
    "ls", "rm", "env", "pwd", "kill", "tail",
)  # fmt: skip
IMAGE = "iris-sandbox-test:1"
_LIB = re.compile(r"(/\S+)")


def _files() -> set[str]:
    found: set[str] = set()
    for name in PROGRAMS:
        path = shutil.which(name)
        if path is None:
            continue
        found |= {path, os.path.realpath(path)}
        listed = subprocess.run(["ldd", path], capture_output=True, text=True, check=False)
        for match in _LIB.finditer(listed.stdout):
            found |= {match.group(1), os.path.realpath(match.group(1))}
    # Through the real parent folder: /lib/x/libc.so.6 is usr/lib/x/libc.so.6 in a merged /usr.
    return {
        os.path.join(os.path.realpath(os.path.dirname(f)), os.path.basename(f))
        for f in found
        if os.path.exists(f)
    }


def image_tar() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for top in ("bin", "sbin", "lib", "lib64"):
            if os.path.islink(f"/{top}"):
                tar.add(f"/{top}", arcname=top, recursive=False)
        for folder in ("tmp", "workspace", "proc", "etc"):
            info = tarfile.TarInfo(folder)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if folder == "tmp" else 0o755
            tar.addfile(info)
        for path in sorted(_files()):
            tar.add(path, arcname=path.lstrip("/"), recursive=False)
    return buffer.getvalue()


def import_image(docker_env: dict[str, str]) -> str:
    done = subprocess.run(
        ["docker", "import", "-", IMAGE],
        input=image_tar(),
        capture_output=True,
        env=docker_env,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"docker import failed: {done.stderr.decode(errors='replace')}")
    return IMAGE


def start_container(
    docker_env: dict[str, str],
    name: str,
    work: Path,
    *extra: str,
    start: bool = True,
    no_new_privileges: bool = True,
) -> None:
    """A long-lived container showing ``work`` at /workspace, as docs/sandbox.md tells an
    operator to run it; with ``start=False`` only created (its configuration is all ``docker
    inspect`` shows)."""
    work.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chown(work, 10000, 10000)
    verb = ["run", "-d"] if start else ["create"]
    command = ["docker", *verb, "--name", name, "--network", "none"]
    if no_new_privileges:
        command += ["--security-opt", "no-new-privileges"]
    command += ["-v", f"{work}:/workspace", *extra, IMAGE, "sleep", "infinity"]
    done = subprocess.run(command, capture_output=True, text=True, env=docker_env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"docker run failed: {done.stderr}")

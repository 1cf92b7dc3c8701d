"""The guest's workspace tar is hostile input: Iris (root) extracts only regular files and
folders, each under the work folder without following a link, and a broken exit file costs the
exit code, never the workspace."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

from iris_runtime.tools.sandbox.firecracker_plan import OUT_DRIVE, VmPlan
from iris_runtime.tools.sandbox.firecracker_run import EXIT_FILE, copy_out


def _plan(tmp_path: Path) -> VmPlan:
    work = tmp_path / "work"
    work.mkdir()
    plan = VmPlan(
        vm_id="vm1",
        firecracker="/usr/bin/firecracker",
        jailer="/usr/bin/jailer",
        kernel="k",
        rootfs="r",
        chroot_base=str(tmp_path / "jail"),
        workspace=str(work),
        argv=["true"],
        env={},
    )
    plan.chroot.mkdir(parents=True)
    return plan


def _add(tar: tarfile.TarFile, name: str, data: bytes = b"", **fields: object) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    for key, value in fields.items():
        setattr(info, key, value)
    tar.addfile(info, io.BytesIO(data) if data else None)


def _hostile_tar(plan: VmPlan, outside: Path, exit_text: bytes) -> None:
    """The guest's tar, aiming every way it can at ``outside`` (made here, with a victim
    file) and at the host, around one kept file; its exit file says ``exit_text``."""
    outside.mkdir()
    (outside / "victim").write_text("victim\n")
    with tarfile.open(plan.chroot / OUT_DRIVE, "w") as tar:
        _add(tar, "./link", type=tarfile.SYMTYPE, linkname=str(outside))
        _add(tar, "./link/planted", b"through the link\n")
        _add(tar, "./hard", type=tarfile.LNKTYPE, linkname=str(outside / "victim"))
        _add(tar, "../escaped", b"dot dot\n")
        _add(tar, str(outside / "absolute"), b"absolute\n")
        _add(tar, "./dev", type=tarfile.CHRTYPE, devmajor=1, devminor=3)
        _add(tar, "./fifo", type=tarfile.FIFOTYPE)
        _add(tar, "./dir", type=tarfile.DIRTYPE, mode=0o755)
        _add(tar, "./dir/kept.txt", b"kept\n", mode=0o4755)
        _add(tar, f"./{EXIT_FILE}", exit_text)


def test_only_files_and_folders_land_in_the_work_folder(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    outside = tmp_path / "outside"
    _hostile_tar(plan, outside, b"3\n")
    assert copy_out(plan) == 3
    work = Path(plan.workspace)
    assert (work / "dir" / "kept.txt").read_text() == "kept\n"
    assert not (work / "dir" / "kept.txt").stat().st_mode & 0o7000  # no setuid from the guest
    assert sorted(p.name for p in outside.iterdir()) == ["victim"]
    assert (outside / "victim").read_text() == "victim\n"
    assert not (tmp_path / "escaped").exists()
    assert not (work / "link").is_symlink()  # "link/planted" made it a plain folder at most
    for name in ("hard", "dev", "fifo", EXIT_FILE):
        assert not os.path.lexists(work / name), name


def test_a_broken_exit_file_keeps_the_workspace(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    _hostile_tar(plan, tmp_path / "outside", b"not a number\n")
    assert copy_out(plan) == 1
    assert (Path(plan.workspace) / "dir" / "kept.txt").read_text() == "kept\n"

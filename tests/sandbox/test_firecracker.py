"""The firecracker level against a stand-in VMM (tests/sandbox/fake_firecracker.py): what Iris
sends to Firecracker's API socket, the jailer's argv, the TAP/IP plan, the rootfs copy and its
removal, and the workspace copied in and out, through a served Iris. One real boot test runs
where a VM can boot, and is skipped here with the reason."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from iris_runtime.testing.server import IrisServer, clean_environment, free_port, run_iris
from iris_runtime.tools.sandbox.base import SandboxUnavailable
from iris_runtime.tools.sandbox.firecracker_plan import tap_plan
from iris_runtime.tools.sandbox.firecracker_taps import TapAllocator
from tests.sandbox.fake_firecracker import install
from tests.sandbox.support import assert_boundary, require_tools, scripted, served_turn
from tests.web.conftest import SSEReader


def _environment(tmp_path: Path, listen_delay: float = 0.0) -> tuple[dict[str, str], Path]:
    record = tmp_path / "firecracker-calls.jsonl"
    jailer, firecracker = install(tmp_path / "bin", record, listen_delay)
    kernel, rootfs = tmp_path / "vmlinux", tmp_path / "rootfs.ext4"
    kernel.write_bytes(b"kernel")
    rootfs.write_bytes(b"rootfs image")
    env = {
        "IRIS_FIRECRACKER_BIN": str(firecracker),
        "IRIS_JAILER_BIN": str(jailer),
        "IRIS_FIRECRACKER_KERNEL": str(kernel),
        "IRIS_FIRECRACKER_ROOTFS": str(rootfs),
        "IRIS_FIRECRACKER_CHROOT_BASE": str(tmp_path / "jail"),
        "IRIS_FIRECRACKER_TAP_LOCKS": str(tmp_path / "tap-locks"),
    }
    return env, record


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _require() -> None:
    if os.geteuid() != 0:
        pytest.skip("the jailer runs as root")
    require_tools("bwrap", "ip", "setpriv")


def _require_tap() -> None:
    _require()
    probe = subprocess.run(
        ["ip", "tuntap", "add", "dev", "ifcprobe", "mode", "tap"], check=False, capture_output=True
    )
    if probe.returncode != 0:
        pytest.skip(f"cannot create a TAP device here: {probe.stderr.decode().strip()}")
    subprocess.run(["ip", "link", "del", "ifcprobe"], check=False, capture_output=True)


def test_tap_plan_gives_each_vm_its_own_slash_30() -> None:
    first, second = tap_plan("172.30.0.0/16", 0), tap_plan("172.30.0.0/16", 1)
    assert (first.device, first.host_ip, first.guest_ip) == ("ifc0", "172.30.0.1", "172.30.0.2")
    assert (second.host_ip, second.guest_ip) == ("172.30.0.5", "172.30.0.6")
    assert first.boot_arg() == "ip=172.30.0.2::172.30.0.1:255.255.255.252::eth0:off"
    assert first.guest_mac != second.guest_mac
    with pytest.raises(ValueError):
        tap_plan("10.0.0.0/30", 1)


def test_a_model_turn_in_a_microvm(tmp_path: Path, start_iris: Callable[..., IrisServer]) -> None:
    _require()
    env, record = _environment(tmp_path)
    iris, report, results = served_turn(start_iris, tmp_path, "firecracker", **env)
    assert_boundary(iris.data_dir, report, results)
    assert report["links"] == "lo,"
    assert report["hostname"] == "microvm"  # the stand-in guest's, not the host's
    calls = _records(record)
    jailer_argv = next(c["jailer_argv"] for c in calls if "jailer_argv" in c)
    assert jailer_argv[jailer_argv.index("--uid") + 1] == "10000"
    assert jailer_argv[jailer_argv.index("--gid") + 1] == "10000"
    assert jailer_argv[jailer_argv.index("--exec-file") + 1] == env["IRIS_FIRECRACKER_BIN"]
    assert "--no-seccomp" not in jailer_argv
    files = next(c["chroot_files"] for c in calls if "chroot_files" in c)
    assert {"rootfs.ext4", "vmlinux", "workspace-in.tar", "workspace-out.tar"} <= set(files)
    # The in-drive carries the command's environment (its run token): Firecracker's, 0600.
    assert next(c["in_drive"] for c in calls if "in_drive" in c) == [0o600, 10000]
    api = [(c["path"], c["body"]) for c in calls if c.get("method") == "PUT"]
    boot = dict(api)["/boot-source"]
    assert boot["kernel_image_path"] == "vmlinux" and "init=/sbin/iris-init" in boot["boot_args"]
    assert dict(api)["/drives/rootfs"]["is_root_device"] is True
    assert dict(api)["/drives/workspace_in"]["is_read_only"] is True
    assert not any(path.startswith("/network-interfaces") for path, _ in api)
    assert api[-1] == ("/actions", {"action_type": "InstanceStart"})
    # Every VM's jail, rootfs copy included, is gone with the VM.
    assert list((tmp_path / "jail" / "firecracker").iterdir()) == []


def test_a_vmm_slow_to_listen_is_waited_for(
    tmp_path: Path, start_iris: Callable[..., IrisServer]
) -> None:
    """Firecracker's socket file appears when it binds, before it listens; on a loaded host a
    connect in between is refused. Iris waits for the listener, not for the file."""
    _require()
    env, _ = _environment(tmp_path, listen_delay=1.0)
    iris, report, results = served_turn(start_iris, tmp_path, "firecracker", **env)
    assert_boundary(iris.data_dir, report, results)
    assert not results["probe"]["isError"], results["probe"]["result"]


def test_relative_paths_are_from_iris_s_own_folder(
    tmp_path: Path, start_iris: Callable[..., IrisServer]
) -> None:
    """The VM's helper runs in the workspace: a relative kernel, rootfs or jail folder in the
    settings still means what it meant where Iris was started (this test's folder)."""
    _require()
    env, _ = _environment(tmp_path)
    for name in (
        "IRIS_FIRECRACKER_KERNEL",
        "IRIS_FIRECRACKER_ROOTFS",
        "IRIS_FIRECRACKER_CHROOT_BASE",
    ):
        env[name] = os.path.relpath(env[name])
    iris, report, results = served_turn(start_iris, tmp_path, "firecracker", **env)
    assert_boundary(iris.data_dir, report, results)
    assert list((tmp_path / "jail" / "firecracker").iterdir()) == []  # and cleaned up there


def test_firecracker_net_plans_a_tap_device_and_removes_it(
    tmp_path: Path, start_iris: Callable[..., IrisServer]
) -> None:
    _require_tap()
    env, record = _environment(tmp_path)
    served_turn(start_iris, tmp_path, "firecracker:net", **env)
    api = [(c["path"], c["body"]) for c in _records(record) if c.get("method") == "PUT"]
    nets = [body for path, body in api if path == "/network-interfaces/eth0"]
    assert nets and all(body["host_dev_name"].startswith("ifc") for body in nets)
    boots = [body["boot_args"] for path, body in api if path == "/boot-source"]
    assert all(" ip=172.30." in args for args in boots)
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True)
    for body in nets:
        assert f" {body['host_dev_name']}:" not in links.stdout  # removed with its VM


def _networked_iris(
    start_iris: Callable[..., IrisServer], folder: Path, locks: Path, **extra: str
) -> tuple[IrisServer, Path]:
    folder.mkdir()
    env, record = _environment(folder)
    env["IRIS_FIRECRACKER_TAP_LOCKS"] = str(locks)  # host-wide, as on a real host
    command = {"command": "sleep 3; echo ran", "timeout": 60}
    turns = [[{"tool": "bash", "args": command}], [{"text": "ok"}]]
    iris = scripted(start_iris, folder, turns, IRIS_SANDBOX="firecracker:net", **env, **extra)
    return iris, record


def _devices(record: Path) -> list[str]:
    return [
        c["body"]["host_dev_name"]
        for c in _records(record)
        if c.get("method") == "PUT" and c["path"] == "/network-interfaces/eth0"
    ]


def test_two_irises_never_share_a_tap_device(
    tmp_path: Path, start_iris: Callable[..., IrisServer]
) -> None:
    """Iris and a root sub-agent are separate processes: their VMs run at once on different
    /30s, and a device left on the host is never handed out."""
    _require_tap()
    locks = tmp_path / "locks"
    left = subprocess.run(
        ["ip", "tuntap", "add", "dev", "ifc0", "mode", "tap"], check=False, capture_output=True
    )
    try:
        first, first_record = _networked_iris(start_iris, tmp_path / "a", locks)
        second, second_record = _networked_iris(start_iris, tmp_path / "b", locks)
        streams = [SSEReader(iris, "n") for iris in (first, second)]
        with ThreadPoolExecutor(2) as pool:
            replies = list(
                pool.map(
                    lambda iris: iris.post("/sessions/n/message", json_body={"text": "go"}),
                    (first, second),
                )
            )
        for stream in streams:
            stream.wait_for(lambda events: any(e["event"] == "final" for e in events))
            stream.close()
    finally:
        if left.returncode == 0:
            subprocess.run(["ip", "link", "del", "ifc0"], check=False, capture_output=True)
    assert [reply.json()["text"] for reply in replies] == ["ok", "ok"]
    # The last VM of each is its command's (the start-up probes ran one each, before).
    devices = [_devices(first_record)[-1], _devices(second_record)[-1]]
    assert devices[0] != devices[1], devices
    assert "ifc0" not in _devices(first_record) + _devices(second_record)  # it existed already
    for stream in streams:  # both commands really ran, each in its VM
        ended = [e for e in stream.events if e["event"] == "tool" and e["phase"] == "end"]
        assert not ended[0]["isError"] and "ran" in ended[0]["result"], ended[0]["result"]


def test_leases_are_host_wide_and_crashes_free_them(tmp_path: Path) -> None:
    """Two allocators (two processes' worth) on one lock folder never lease the same /30; a
    device Iris left with its lease free is reclaimed; a device that is not Iris's is not."""
    _require_tap()
    locks = tmp_path / "locks"
    subnet = "172.31.0.0/28"  # four /30s: ifc0 to ifc3
    first, second = TapAllocator(subnet, locks), TapAllocator(subnet, locks)
    held = [first.lease(), second.lease(), first.lease()]
    assert [lease.tap.device for lease in held] == ["ifc0", "ifc1", "ifc2"]
    foreign = "ifc3"  # a device of the same name pattern, not made by Iris (no lock file)
    subprocess.run(["ip", "tuntap", "add", "dev", foreign, "mode", "tap"], check=True)
    try:
        with pytest.raises(SandboxUnavailable, match=re.escape(f"no free /30 left in {subnet}")):
            second.lease()  # ifc0-2 are held, ifc3 is someone else's
        # A crash: ifc2's lease dropped with its holders while the device stayed.
        held[2].release()
        subprocess.run(["ip", "tuntap", "add", "dev", "ifc2", "mode", "tap"], check=True)
        again = TapAllocator(subnet, locks).lease()
        assert again.tap.device == "ifc2"  # reclaimed: deleted, leased again
        assert not Path("/sys/class/net/ifc2").exists()
        assert Path(f"/sys/class/net/{foreign}").exists()  # never touched
    finally:
        for device in (foreign, "ifc2"):
            subprocess.run(["ip", "link", "del", device], check=False, capture_output=True)


def test_a_lease_folder_others_can_write_is_refused(tmp_path: Path) -> None:
    locks = tmp_path / "open-locks"
    locks.mkdir(mode=0o777)
    locks.chmod(0o777)
    with pytest.raises(SandboxUnavailable, match="must be a folder of Iris's user with mode 0700"):
        TapAllocator("172.31.0.0/28", locks).lease()


def test_a_missing_kernel_stops_serve(tmp_path: Path) -> None:
    env, _ = _environment(tmp_path)
    env["IRIS_FIRECRACKER_KERNEL"] = str(tmp_path / "no-such-kernel")
    cli_env = clean_environment(
        IRIS_DATA_DIR=str(tmp_path / "data"), IRIS_API_PORT=str(free_port()), **env
    )
    result = run_iris("serve", "--sandbox", "firecracker", env=cli_env, timeout=60)
    assert result.returncode != 0
    assert "IRIS_FIRECRACKER_KERNEL must name a file" in result.stderr


REAL = ("IRIS_TEST_FIRECRACKER_KERNEL", "IRIS_TEST_FIRECRACKER_ROOTFS")


def test_a_real_microvm_boots_and_runs_the_command(
    tmp_path: Path, start_iris: Callable[..., IrisServer]
) -> None:
    """Runs where Firecracker can boot a VM: firecracker and jailer on PATH, /dev/kvm, and a
    kernel and rootfs (with /sbin/iris-init, docs/sandbox.md) named by IRIS_TEST_FIRECRACKER_*.
    """
    missing = [name for name in ("firecracker", "jailer") if shutil.which(name) is None]
    missing += [name for name in REAL if not os.environ.get(name)]
    if missing or not os.access("/dev/kvm", os.R_OK | os.W_OK):
        pytest.skip(
            "needs a host where Firecracker boots a VM (this machine is itself a nested microVM "
            f"where no stock kernel boots); missing: {', '.join(missing) or '/dev/kvm'}"
        )
    env = {
        "IRIS_FIRECRACKER_KERNEL": os.environ[REAL[0]],
        "IRIS_FIRECRACKER_ROOTFS": os.environ[REAL[1]],
        "IRIS_FIRECRACKER_CHROOT_BASE": str(tmp_path / "jail"),
    }
    iris, report, results = served_turn(start_iris, tmp_path, "firecracker", **env)
    assert_boundary(iris.data_dir, report, results)
    assert report["links"] == "lo,"

"""Converge time of playbooks/site.yml on a fresh Debian bookworm server.

The server is a debootstrap tree (built once into ``--cache-dir``) booted with systemd-nspawn on
a throwaway overlay, reached with the ``community.docker.nsenter`` connection, as the tests do
(``tests/provisioning/ansible_host.py``). Packages come from a wheelhouse (``pip download``, cached
beside the tree), so after the first run nothing needs the network.

Figures (seconds, wall time of ``ansible-playbook``):

- ``first_converge_s``: site.yml on the fresh server (OpenBao installed, initialised, unsealed and
  configured; Iris installed and healthy; one sub-agent declared).
- ``second_converge_s``: the same again.
- ``check_mode_s``: the same with ``--check``.
- ``second_changed``, ``check_changed``: tasks those two runs reported changed (baseline 0: the
  roles are idempotent; the tests enforce it, here it is only shown). The roles install from a
  snapshot of the checkout taken at the start, so editing it meanwhile changes nothing.
- ``boot_s``: systemd-nspawn start to ``systemctl is-system-running`` answering.

Baseline: a playbook that gathers facts and pings the same server, median of three, measured
before the first converge: the fixed cost of an Ansible run over this connection. ``--profile``
prints the ten slowest tasks of each run on stderr (ansible.posix.profile_tasks).

Needs root, debootstrap, systemd-nspawn, nsenter, unshare and the ``deploy`` extra (ansible);
without them it says so on stderr and prints no figures.
"""

from __future__ import annotations

import os
import random
import secrets
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _cli import bench_parser, run_main
from _figures import emit
from _servers import temp_workdir

from iris_runtime.agents.ports import can_bind

BENCH = "ansible_converge"
TOOLS = ("debootstrap", "systemd-nspawn", "nsenter", "unshare")
BASELINE_PLAYBOOK = """\
- name: Baseline
  hosts: all
  gather_facts: true
  tasks:
    - name: Ping
      ansible.builtin.ping:
"""


def missing_requirements() -> list[str]:
    missing = [] if os.geteuid() == 0 else ["root"]
    missing += [tool for tool in TOOLS if shutil.which(tool) is None]
    if not (Path(sys.executable).parent / "ansible-playbook").exists():
        missing.append("ansible-playbook (pip install -e '.[deploy]')")
    return missing


def free_block() -> int:
    """A base port with base..base+2, +10..+19 and +110..+119 free on loopback."""
    for _ in range(200):
        base = random.randrange(20000, 30000, 200)
        wanted = [base, base + 1, base + 2, *range(base + 10, base + 20)]
        wanted += [port + 100 for port in range(base + 10, base + 20)]
        if all(can_bind(port) for port in wanted):
            return base
    raise RuntimeError("no free block of ports on loopback")


def main() -> int:
    parser = bench_parser(__doc__)  # no timed load phase: --seconds is ignored
    parser.add_argument(
        "--cache-dir",
        default="~/.cache/iris-bench",
        help="where the debootstrap tree and the wheelhouse are kept [%(default)s]",
    )
    parser.add_argument("--profile", action="store_true", help="slowest tasks on stderr")
    args = parser.parse_args()
    missing = missing_requirements()
    if missing:
        print(f"{BENCH}: skipped, needs {', '.join(missing)}", file=sys.stderr)
        return 0

    from tests.provisioning.ansible_host import (
        AnsibleHost,
        AnsibleRun,
        bare_server,
        snapshot_checkout,
    )
    from tests.provisioning.rootfs import build_shared_rootfs
    from tests.provisioning.wheelhouse import build_wheelhouse, wheelhouse_requirements

    cache = Path(args.cache_dir).expanduser()
    started = time.perf_counter()
    rootfs = build_shared_rootfs(cache / "debian-rootfs")
    wheels = build_wheelhouse(cache / "wheelhouse-deploy", wheelhouse_requirements())
    print(f"rootfs and wheelhouse ready in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    env = {"ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.profile_tasks"} if args.profile else {}

    def timed(
        server: AnsibleHost, playbook: str | Path, label: str, check: bool = False
    ) -> tuple[float, int]:
        run: AnsibleRun = server.playbook(playbook, check=check, env=env, label=label)
        recap = run.recap.get(server.name)
        if run.returncode != 0 or recap is None or recap.failed:
            raise RuntimeError(f"{label} failed:\n{run.describe()}")
        print(f"{label}: {run.seconds:.1f} s, {recap}", file=sys.stderr)
        if args.profile:
            lines = run.output.splitlines()
            top = [i for i, line in enumerate(lines) if line.startswith("=" * 20)]
            if top:
                print("\n".join(lines[top[-1] + 1 : top[-1] + 11]), file=sys.stderr)
        if label in ("second", "check") and recap.changed:
            print(run.describe(), file=sys.stderr)
        return run.seconds, recap.changed

    with temp_workdir(prefix="iris-bench-ansible-") as workdir:
        base = free_block()
        boot_started = time.perf_counter()
        with bare_server(rootfs, workdir / "server") as server:
            boot = time.perf_counter() - boot_started
            server.set_vars(
                iris_secrets_init_file=str(workdir / "openbao-init.json"),
                iris_secrets_wheelhouse=str(wheels),
                iris_secrets_port=base,
                iris_secrets_cluster_port=base + 1,
                iris_secrets_values={"BENCH_KEY": secrets.token_hex(16)},
                iris_runtime_wheelhouse=str(wheels),
                iris_runtime_source_dir=str(snapshot_checkout(workdir / "checkout")),
                iris_runtime_plugins=["iris-skill-get-secret", "iris-skill-spawn-agent"],
                iris_runtime_api_port=base + 2,
                iris_runtime_agent_ports=f"{base + 10}-{base + 19}",
                iris_agent_agents=[{"name": "bench", "skills": ["get-secret"]}],
            )
            baseline_file = workdir / "baseline.yml"
            baseline_file.write_text(BASELINE_PLAYBOOK)
            baselines = sorted(timed(server, baseline_file, f"baseline-{i}")[0] for i in range(3))
            baseline = baselines[1]
            first, _ = timed(server, "playbooks/site.yml", "first")
            second, second_changed = timed(server, "playbooks/site.yml", "second")
            check, check_changed = timed(server, "playbooks/site.yml", "check", check=True)
    emit(BENCH, "first_converge_s", first, "s", baseline)
    emit(BENCH, "second_converge_s", second, "s", baseline)
    emit(BENCH, "check_mode_s", check, "s", baseline)
    emit(BENCH, "second_changed", second_changed, "tasks", 0)
    emit(BENCH, "check_changed", check_changed, "tasks", 0)
    emit(BENCH, "boot_s", boot, "s")
    return 0


if __name__ == "__main__":
    run_main(BENCH, main)

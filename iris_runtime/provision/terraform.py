"""A thin driver over Terraform's machine-readable UI (``-json``), for the Docker-mode agents.

Why not python-terraform: unmaintained since 2019 and broken on current Terraform. The ``-json``
UI is Terraform's stable interface for programs: one JSON object per line, typed (apply_start,
apply_complete, diagnostic, change_summary...), so progress streams as it happens and errors
come back with their summary and detail instead of a screen of text.

Rules kept here, so every caller gets them:

- Secrets never on argv: values go in a ``.tfvars.json`` file written 0600 for one run (or
  ``TF_VAR_*``), and Terraform runs with umask 077 so its state (which holds the agents' tokens)
  and backups are created 0600.
- Terraform gets a short, explicit environment, not Iris's (which may hold keys): PATH, HOME,
  locale, the Docker client settings, ``TF_*``.
- Its working data (``TF_DATA_DIR``) and the local state live in ``state_dir``, outside the
  checkout; the state path is given to the local backend at init.
- Ctrl-C is forwarded as one SIGINT (Terraform runs in its own session so the terminal's signal
  does not reach it twice, which would make it stop hard) and the driver waits for it to exit, so
  the state lock is released (:mod:`.terraform_process`).
- Concurrent runs wait for the state lock (``-lock-timeout``) instead of failing.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from iris_runtime.errors import ProvisionError
from iris_runtime.private_files import FILE_MODE, private_dir
from iris_runtime.provision.launch import Progress, no_progress
from iris_runtime.provision.terraform_process import interruptible
from iris_runtime.provision.terraform_ui import (
    Diagnostic,
    describe,
    diagnostic_of,
    parse_line,
    shorten,
)

# Names that lived here before the -json UI and the process got modules of their own.
__all__ = ["INSTALL_HINT", "Diagnostic", "Terraform", "describe"]

INSTALL_HINT = (
    "install Terraform 1.5 or newer (a single binary: the HashiCorp release zip from "
    "developer.hashicorp.com/terraform/install, or the HashiCorp apt repository) and put it on "
    "PATH, or point IRIS_TERRAFORM_BIN at it"
)

# What Terraform and the docker CLI it starts may see of our environment.
_PASSED_ENV = (
    "PATH",
    "HOME",
    "USER",
    "LANG",
    "LC_ALL",
    "TZ",
    "TMPDIR",
    "DOCKER_HOST",
    "DOCKER_CONTEXT",
    "DOCKER_CONFIG",
    "DOCKER_CERT_PATH",
    "DOCKER_TLS_VERIFY",
    "DOCKER_BUILDKIT",
    "SSL_CERT_FILE",
)


class Terraform:
    """Runs one Terraform root (``work_dir``) with its data and state in ``state_dir``."""

    def __init__(
        self,
        work_dir: Path,
        *,
        state_dir: Path | None = None,
        binary: str = "terraform",
        lock_timeout: str = "300s",
    ) -> None:
        """``state_dir`` holds TF_DATA_DIR and the local state; None: ``work_dir`` (Terraform's
        own default), for callers that have no data dir of their own."""
        self.work_dir = work_dir
        self.state_dir = state_dir if state_dir is not None else work_dir
        self.binary = binary
        self.lock_timeout = lock_timeout
        self._own_state_dir = state_dir is not None

    def with_state_dir(self, state_dir: Path) -> Terraform:
        """The same driver with its data and state in ``state_dir`` (unless it has one already)."""
        if self._own_state_dir:
            return self
        return Terraform(
            self.work_dir, state_dir=state_dir, binary=self.binary, lock_timeout=self.lock_timeout
        )

    @property
    def state_file(self) -> Path:
        return self.state_dir / "terraform.tfstate"

    # -- commands ---------------------------------------------------------------------------

    def init(self, progress: Progress = no_progress) -> None:
        """Prepare the working data (modules, backend). Needs no network: no providers."""
        progress("terraform init")
        self._run_text(
            [
                "init",
                "-input=false",
                "-no-color",
                f"-lock-timeout={self.lock_timeout}",
                f"-backend-config=path={self.state_file}",
            ]
        )

    def validate(self) -> list[Diagnostic]:
        """The configuration's warnings; raises ProvisionError with its errors."""
        out = self._run_text(["validate", "-json", "-no-color"], check=False)
        try:
            report = json.loads(out.stdout)
        except json.JSONDecodeError:
            raise ProvisionError(f"terraform validate failed: {self._tail(out)}") from None
        diagnostics = [diagnostic_of(d) for d in report.get("diagnostics", [])]
        errors = [d for d in diagnostics if d.severity == "error"]
        if errors or not report.get("valid", False):
            raise ProvisionError(
                "terraform configuration is invalid: " + "; ".join(map(str, errors))
            )
        return diagnostics

    def plan(
        self,
        progress: Progress = no_progress,
        *,
        variables: Mapping[str, Any] | None = None,
        var_files: Sequence[Path] = (),
    ) -> bool:
        """Whether applying would change anything (``-detailed-exitcode``: 0 none, 2 some),
        output values included."""
        return self.planned_changes(progress, variables=variables, var_files=var_files)[0]

    def planned_changes(
        self,
        progress: Progress = no_progress,
        *,
        variables: Mapping[str, Any] | None = None,
        var_files: Sequence[Path] = (),
    ) -> tuple[bool, list[str]]:
        """Whether applying would change anything, and the addresses of the resources it
        would create, change or destroy (empty when only output values would change)."""
        resources: list[str] = []

        def collect(message: Mapping[str, Any]) -> None:
            change = message.get("change") or {}
            if message.get("type") == "planned_change" and change.get("action") != "noop":
                resources.append(str((change.get("resource") or {}).get("addr", "")))

        code = self._run_json(
            ["plan", "-detailed-exitcode", "-lock-timeout=" + self.lock_timeout],
            progress,
            variables,
            var_files,
            ok_codes=(0, 2),
            on_message=collect,
        )
        return code == 2, resources

    def apply(
        self,
        progress: Progress = no_progress,
        *,
        variables: Mapping[str, Any] | None = None,
        var_files: Sequence[Path] = (),
        targets: Sequence[str] = (),
    ) -> None:
        """Apply everything, or only ``targets`` (resource or module addresses, e.g. to destroy
        one removed module without touching anything else)."""
        self._apply(["apply"], progress, variables, var_files, targets)

    def destroy(
        self,
        progress: Progress = no_progress,
        *,
        variables: Mapping[str, Any] | None = None,
        var_files: Sequence[Path] = (),
        targets: Sequence[str] = (),
    ) -> None:
        """Destroy everything, or only ``targets`` (and what depends on them). Run it while the
        resources are still in the configuration: destroy-time provisioners of a block that is
        gone from the configuration never run."""
        self._apply(["apply", "-destroy"], progress, variables, var_files, targets)

    def _apply(
        self,
        command: list[str],
        progress: Progress,
        variables: Mapping[str, Any] | None,
        var_files: Sequence[Path],
        targets: Sequence[str],
    ) -> None:
        self._run_json(
            [
                *command,
                "-auto-approve",
                "-lock-timeout=" + self.lock_timeout,
                *(f"-target={t}" for t in targets),
            ],
            progress,
            variables,
            var_files,
        )

    def output(self, name: str) -> Any:
        """The value of one root output (sensitive ones included), or None when it is absent."""
        out = self._run_text(["output", "-json", "-no-color", name], check=False)
        if out.returncode != 0:
            if "not found" in (out.stderr + out.stdout).lower():
                return None
            raise ProvisionError(f"terraform output {name} failed: {self._tail(out)}")
        return json.loads(out.stdout)

    # -- running ----------------------------------------------------------------------------

    def executable(self) -> str:
        path = shutil.which(self.binary)
        if path is None:
            raise ProvisionError(f"terraform not found ({self.binary!r}): {INSTALL_HINT}")
        return path

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k in _PASSED_ENV}
        env.update(
            (k, v)
            for k, v in os.environ.items()
            if k.startswith("TF_") and k not in {"TF_DATA_DIR", "TF_CLI_CONFIG_FILE"}
        )
        # A CLI config that is named but missing only adds a warning to every command.
        cli_config = os.environ.get("TF_CLI_CONFIG_FILE", "")
        if cli_config and Path(cli_config).is_file():
            env["TF_CLI_CONFIG_FILE"] = cli_config
        env.setdefault("PATH", os.defpath)
        env.update(
            TF_DATA_DIR=str(self.state_dir / ".terraform"),
            TF_IN_AUTOMATION="1",
            TF_INPUT="0",
            CHECKPOINT_DISABLE="1",  # no version check call home
        )
        return env

    def _prepare(self) -> tuple[str, dict[str, str]]:
        binary = self.executable()
        if self._own_state_dir:
            private_dir(self.state_dir)
        return binary, self.environment()

    def _run_text(self, args: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
        binary, env = self._prepare()
        with interruptible([binary, *args], cwd=self.work_dir, env=env) as run:
            code, stdout, stderr = run.finish()
        result = subprocess.CompletedProcess([binary, *args], code, stdout, stderr)
        if check and result.returncode != 0:
            raise ProvisionError(f"terraform {args[0]} failed: {self._tail(result)}")
        return result

    def _run_json(
        self,
        args: list[str],
        progress: Progress,
        variables: Mapping[str, Any] | None,
        var_files: Sequence[Path],
        ok_codes: tuple[int, ...] = (0,),
        on_message: Callable[[Mapping[str, Any]], None] | None = None,
    ) -> int:
        binary, env = self._prepare()
        errors: list[Diagnostic] = []
        with self._var_file(variables) as temp_var_file:
            files = [*var_files, *([temp_var_file] if temp_var_file else [])]
            argv = [
                binary,
                *args,
                "-json",
                "-input=false",
                *(f"-var-file={f}" for f in files),
            ]
            with interruptible(argv, cwd=self.work_dir, env=env) as run:
                for line in run.lines():
                    message = parse_line(line)
                    if message is None:
                        continue
                    if on_message is not None:
                        on_message(message)
                    if message.get("type") == "diagnostic":
                        diagnostic = diagnostic_of(message.get("diagnostic") or {})
                        if diagnostic.severity == "error":
                            errors.append(diagnostic)
                    shown = describe(message)
                    if shown:
                        progress(shown)
                code, _, stderr = run.finish()
        if code in ok_codes and not errors:
            return code
        reason = "; ".join(map(str, errors)) or shorten(stderr) or f"exit status {code}"
        raise ProvisionError(f"terraform {args[0]} failed: {reason}")

    @contextlib.contextmanager
    def _var_file(self, variables: Mapping[str, Any] | None) -> Iterator[Path | None]:
        """Variables for one run in a 0600 file that is deleted afterwards (values may be
        secrets: never on the command line)."""
        if not variables:
            yield None
            return
        path = self.state_dir / f".run-{os.getpid()}-{secrets.token_hex(6)}.tfvars.json"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(dict(variables), handle)
            yield path
        finally:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    @staticmethod
    def _tail(result: subprocess.CompletedProcess[str]) -> str:
        text = (result.stderr or "").strip() or (result.stdout or "").strip()
        lines = [
            ln for ln in text.splitlines() if ln.strip() and not ln.startswith(("│", "╷", "╵"))
        ]
        return shorten(" ".join(lines[-6:])) or f"exit status {result.returncode}"

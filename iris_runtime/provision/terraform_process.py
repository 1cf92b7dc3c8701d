"""Running Terraform so that Ctrl-C never leaves its state locked.

Terraform runs in its own session (so the terminal's SIGINT does not reach it twice, which would
make it stop hard) with umask 077 (its state holds the agents' tokens, and its backups too). If
the caller is interrupted or fails, Terraform gets one SIGINT and is waited for, so it releases
the state lock.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO


class TerraformRun:
    """A running Terraform: stdout is a pipe read line by line, stderr a temp file (so a chatty
    stderr can never block it while we read stdout)."""

    def __init__(self, proc: subprocess.Popen[str], stderr: IO[str]) -> None:
        self.proc = proc
        self._stderr = stderr

    def lines(self) -> Iterator[str]:
        assert self.proc.stdout is not None
        # Not `yield from`: closing an abandoned generator would close the pipe with it.
        for line in self.proc.stdout:  # noqa: UP028
            yield line

    def finish(self) -> tuple[int, str, str]:
        """Exit status, the rest of stdout, and stderr."""
        stdout, _ = self.proc.communicate()
        self._stderr.seek(0)
        return self.proc.returncode, stdout or "", self._stderr.read()


@contextlib.contextmanager
def interruptible(argv: list[str], *, cwd: Path, env: Mapping[str, str]) -> Iterator[TerraformRun]:
    """Start Terraform in its own session with umask 077. If the caller is interrupted (Ctrl-C)
    or fails, Terraform gets one SIGINT and we wait until it has exited, so it can release the
    state lock; a second Ctrl-C is forwarded too (Terraform then stops at once)."""
    with tempfile.TemporaryFile("w+", encoding="utf-8") as stderr:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            umask=0o077,
            start_new_session=True,
        )
        try:
            yield TerraformRun(proc, stderr)
        except BaseException:
            _stop(proc)
            raise
        finally:
            if proc.stdout is not None:
                proc.stdout.close()


def _stop(proc: subprocess.Popen[str]) -> None:
    while proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGINT)
        try:
            if proc.stdout is not None and not proc.stdout.closed:
                proc.communicate()  # drain its output so it never blocks on a full pipe
            else:
                proc.wait()
        except KeyboardInterrupt:
            continue

"""One ACP agent process: started with its own environment, its stdio bound to the SDK, its
stderr into Iris's log (bounded), and ended with SIGKILL (spec 004: "killed, with SIGKILL and no
warning").

Between the process's stdout and the SDK sits a line filter: a line that is not a JSON object is
dropped and logged with the agent's name (the SDK would log a bare traceback), and counted, so a
turn that then goes unanswered can say why.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from iris_runtime.acp.lines import read_lines

log = logging.getLogger("iris_runtime.custom_agents.acp")

# The SDK's own default for a stdio line: images arrive base64 in one line.
LINE_LIMIT = 50 * 1024 * 1024
STDERR_LOG_BUDGET = 64 * 1024  # bytes of one process's stderr copied into Iris's log
STDERR_LINE_CHARS = 500
STDERR_TAIL_LINES = 10  # kept for the chat when the process dies
SHOWN_LINE_CHARS = 120
REAP_POLL_SECONDS = 0.05


@dataclass
class AgentProcess:
    kind: str
    process: asyncio.subprocess.Process
    reader: asyncio.StreamReader  # what the SDK reads: stdout, filtered
    stderr_tail: deque[str] = field(default_factory=lambda: deque(maxlen=STDERR_TAIL_LINES))
    malformed: int = 0
    _logged: int = 0
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def alive(self) -> bool:
        return self.process.returncode is None

    def kill(self) -> None:
        """SIGKILL, no warning, to the process's whole group (it was started as a session leader):
        a shell wrapper's or an npx adapter's children go with it. A group already gone is fine."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGKILL)

    async def reap(self, timeout: float = 5.0) -> int | None:
        """Wait for the exit (its status, not the pipes' end: something that escaped the group
        may hold them), then briefly for the pipes to drain; the exit code (None if it would not
        end)."""
        deadline = asyncio.get_running_loop().time() + timeout
        while self.process.returncode is None:
            if asyncio.get_running_loop().time() >= deadline:
                return None
            await asyncio.sleep(REAP_POLL_SECONDS)
        code = self.process.returncode
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.gather(*self._tasks, return_exceptions=True), 1.0)
        return code

    def death(self, code: int | None) -> str:
        """How the process ended, for the chat: the exit code and its last stderr lines."""
        if code is None:
            how = "stopped answering"
        elif code < 0:
            how = f"was killed by signal {-code}"
        else:
            how = f"exited with code {code}"
        tail = " | ".join(self.stderr_tail)
        said = f"; its last stderr lines: {tail}" if tail else ""
        return f"the agent process {how} before answering{said}"

    async def _pump_stdout(self, stdout: asyncio.StreamReader) -> None:
        try:
            async for line in read_lines(stdout):
                if line is None:
                    self._malformed(b"(a line longer than %d bytes)" % LINE_LIMIT)
                else:
                    self._forward(line)
        except (ConnectionError, OSError) as exc:
            log.info("acp agent %s [%d]: stdout closed: %s", self.kind, self.pid, exc)
        finally:
            self.reader.feed_eof()

    def _forward(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except (ValueError, RecursionError):
            message = None
        if not isinstance(message, dict):
            self._malformed(line)
            return
        self.reader.feed_data(line + b"\n")

    def _malformed(self, line: bytes) -> None:
        self.malformed += 1
        shown = line[:SHOWN_LINE_CHARS].decode("utf-8", "replace")
        log.warning(
            "acp agent %s [%d] wrote a line that is not JSON-RPC (ignored): %r",
            self.kind,
            self.pid,
            shown,
        )

    async def _pump_stderr(self, stderr: asyncio.StreamReader) -> None:
        while True:
            try:
                line = await stderr.readline()
            except (ValueError, asyncio.LimitOverrunError):
                continue  # a line over the limit: skip it, keep reading
            except (ConnectionError, OSError):
                return
            if not line:
                return
            text = line.decode("utf-8", "replace").rstrip()[:STDERR_LINE_CHARS]
            if not text:
                continue
            self.stderr_tail.append(text)
            if self._logged < STDERR_LOG_BUDGET:
                self._logged += len(text) + 1
                log.info("acp agent %s [%d] stderr: %s", self.kind, self.pid, text)
                if self._logged >= STDERR_LOG_BUDGET:
                    log.info(
                        "acp agent %s [%d]: further stderr is not logged (%d bytes logged)",
                        self.kind,
                        self.pid,
                        self._logged,
                    )


async def spawn(
    kind: str, argv: list[str], env: Mapping[str, str], cwd: str
) -> tuple[AgentProcess, asyncio.StreamWriter]:
    """Start ``argv``; returns the process and the writer to its stdin."""
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=dict(env),
        cwd=cwd,
        limit=LINE_LIMIT,
        start_new_session=True,  # a Ctrl-C in Iris's terminal is not the agent's
    )
    assert process.stdin is not None and process.stdout is not None
    assert process.stderr is not None
    agent = AgentProcess(kind, process, asyncio.StreamReader(limit=LINE_LIMIT))
    loop = asyncio.get_running_loop()
    agent._tasks = [
        loop.create_task(agent._pump_stdout(process.stdout)),
        loop.create_task(agent._pump_stderr(process.stderr)),
    ]
    log.info("acp agent %s started: pid %d", kind, process.pid)
    return agent, process.stdin


def base_environment() -> dict[str, str]:
    """What every agent process gets from Iris's own environment: the basics of a login, never
    Iris's secrets (names in IRIS_ACP_PASS_ENV are added on purpose by the operator)."""
    names = ["HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "TZ", "TMPDIR"]
    names += [n for n in os.environ if n.startswith("LC_")]
    names += [n.strip() for n in os.environ.get("IRIS_ACP_PASS_ENV", "").split(",") if n.strip()]
    return {n: os.environ[n] for n in names if n in os.environ}

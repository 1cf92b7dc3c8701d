"""Isolation levels for the bash and file tools, one module each: ``host``, ``namespace``
(bubblewrap), ``gvisor`` (runsc), ``docker:<container>`` and ``firecracker`` (+ jailer); the
workspace view they share with the file tools, and the boundary probe. See docs/sandbox.md."""

from iris_runtime.tools.sandbox.base import Launch, Sandbox, SandboxSpec, SandboxUnavailable
from iris_runtime.tools.sandbox.host import HostSandbox
from iris_runtime.tools.sandbox.select import Level, open_sandbox, prove, split_level

__all__ = [
    "HostSandbox",
    "Launch",
    "Level",
    "Sandbox",
    "SandboxSpec",
    "SandboxUnavailable",
    "open_sandbox",
    "prove",
    "split_level",
]

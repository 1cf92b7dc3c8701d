"""The "host" sandbox level: commands run directly on the host, unwrapped."""

from __future__ import annotations


class HostSandbox:
    name = "host"

    def wrap(self, argv: list[str]) -> list[str]:
        return argv

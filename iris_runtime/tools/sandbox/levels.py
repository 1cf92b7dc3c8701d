"""The built-in levels, by name (the plugin registers them; ``iris doctor`` lists them)."""

from __future__ import annotations

from iris_runtime.tools.sandbox.docker import open_docker
from iris_runtime.tools.sandbox.firecracker import open_firecracker
from iris_runtime.tools.sandbox.gvisor import open_gvisor
from iris_runtime.tools.sandbox.host import open_host
from iris_runtime.tools.sandbox.namespace import open_namespace
from iris_runtime.tools.sandbox.select import Level

BUILT_IN_LEVELS: dict[str, Level] = {
    "host": Level(open_host),
    "namespace": Level(open_namespace),
    "gvisor": Level(open_gvisor),
    "docker": Level(open_docker),
    "firecracker": Level(open_firecracker),
}

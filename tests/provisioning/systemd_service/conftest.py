"""One booted container for the package's modules (``nspawn.nspawn_host`` boots one per module)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.provisioning.nspawn import NspawnHost, checkout_host
from tests.provisioning.rootfs import debian_rootfs  # noqa: F401 (fixture)
from tests.provisioning.systemd_units import service  # noqa: F401 (fixture)


@pytest.fixture(scope="package")
def nspawn_host(
    debian_rootfs: Path,  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[NspawnHost]:
    """The shared rootfs booted with systemd as PID 1; this checkout runs inside it."""
    yield from checkout_host(debian_rootfs, tmp_path_factory)

"""A data dir owned by Iris's service user, for the tests of a root-run command writing into it
(``iris_runtime.private_files``): nobody:nogroup stands in for the service user."""

from __future__ import annotations

import os
from pathlib import Path

SERVICE = (65534, 65534)  # nobody:nogroup


def service_owned_data(tmp_path: Path) -> Path:
    """``tmp_path/data``, made private (0700) and given to the service user."""
    path = tmp_path / "data"
    path.mkdir(mode=0o700)
    os.chown(path, *SERVICE)
    return path

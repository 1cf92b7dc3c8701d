"""The ``file`` backend: secrets encrypted at rest on this host.

Layout under ``<data>/secrets/`` (directory 0700, files 0600)::

    store.key   a Fernet key (AES-128-CBC + HMAC-SHA256), created on first use
    store.enc   one Fernet token holding the JSON object {name: value}
    store.lock  the flock that serialises writers (never deleted)

Readers take no lock: writes end with an atomic ``os.replace``, so a reader sees the old or the
new file, never a torn one. The decrypted map is cached per (inode, mtime, size) so a hot read
costs a ``stat``, and a write from another process (``iris secrets set``) is seen at once.

The key sits beside the data, so this protects against a stolen backup of the data file or a
copied data dir without the key, not against root on the host. Hosts that need more use Vault.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from iris_runtime import data_layout
from iris_runtime.config import Settings
from iris_runtime.errors import ConfigError
from iris_runtime.private_files import file_lock, private_dir, write_private_file

if TYPE_CHECKING:
    # cryptography is imported when the store is first used, not whenever Iris starts.
    from cryptography.fernet import Fernet


class FileSecretStore:
    """Secrets in one encrypted file; see the module docstring."""

    name = "file"

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.key_path = self.directory / "store.key"
        self.data_path = self.directory / "store.enc"
        self.lock_path = self.directory / "store.lock"
        self._cache_lock = threading.Lock()
        self._cache: tuple[tuple[int, int, int], dict[str, str]] | None = None
        self._fernet: Fernet | None = None

    def __repr__(self) -> str:
        return f"FileSecretStore({str(self.directory)!r})"

    # -- the SecretBackend contract --------------------------------------------------------

    def get(self, name: str) -> str | None:
        return self._read().get(name)

    def names(self) -> list[str]:
        return sorted(self._read())

    def put(self, name: str, value: str) -> None:
        with self._writing() as values:
            values[name] = value

    def delete(self, name: str) -> bool:
        with self._writing() as values:
            return values.pop(name, None) is not None

    def describe(self) -> str:
        return f"file {self.data_path} (encrypted, key {self.key_path})"

    def check(self) -> None:
        # Diagnose without creating anything: a missing key is fine until the first write.
        if not self.key_path.exists():
            if self.data_path.exists():
                raise ConfigError(f"{self.data_path} exists but its key {self.key_path} is gone")
            return
        self._read()

    # -- storage ---------------------------------------------------------------------------

    def _key(self) -> Fernet:
        if self._fernet is None:
            from cryptography.fernet import Fernet

            private_dir(self.directory)
            with file_lock(self.lock_path):
                if not self.key_path.exists():
                    write_private_file(self.key_path, Fernet.generate_key() + b"\n")
            try:
                self._fernet = Fernet(self.key_path.read_bytes().strip())
            except ValueError:
                raise ConfigError(f"{self.key_path}: not a valid secret store key") from None
        return self._fernet

    def _read(self) -> dict[str, str]:
        fernet = self._key()
        try:
            st = self.data_path.stat()
        except FileNotFoundError:
            return {}
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        with self._cache_lock:
            if self._cache is not None and self._cache[0] == stamp:
                return self._cache[1]
        values = self._decrypt(fernet, self.data_path.read_bytes())
        with self._cache_lock:
            self._cache = (stamp, values)
        return values

    def _decrypt(self, fernet: Fernet, blob: bytes) -> dict[str, str]:
        from cryptography.fernet import InvalidToken

        try:
            data = json.loads(fernet.decrypt(blob.strip()))
        except InvalidToken:
            raise ConfigError(
                f"{self.data_path}: cannot be decrypted with {self.key_path} "
                "(wrong key or a damaged file); nothing was changed"
            ) from None
        if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
            raise ConfigError(f"{self.data_path}: decrypted content is not a name→value map")
        return data

    @contextlib.contextmanager
    def _writing(self) -> Iterator[dict[str, str]]:
        fernet = self._key()
        with file_lock(self.lock_path):
            values = dict(self._read())
            yield values
            write_private_file(self.data_path, fernet.encrypt(json.dumps(values).encode()))


def file_store(settings: Settings) -> FileSecretStore:
    return FileSecretStore(settings.data_dir / data_layout.SECRETS_DIR)

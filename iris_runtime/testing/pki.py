"""Certificates from OpenBao's PKI secrets engine, the way the fleet's hosts get theirs.

``OpenBaoPki(client, mount)`` enables a PKI mount with its own root CA and a role that allows
the names and IP addresses a test asks for; ``issue()`` returns a leaf certificate with its key
and the CA, as PEM text. Write keys with mode 0600 (:func:`write_private`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import hvac

ROLE = "iris-hosts"


@dataclass(frozen=True)
class Issued:
    certificate: str
    private_key: str = field(repr=False)
    ca: str

    def write(self, folder: Path, stem: str) -> tuple[Path, Path]:
        """``stem.crt`` (the leaf, then the CA: a chain) and ``stem.key`` (0600)."""
        cert = folder / f"{stem}.crt"
        cert.write_text(self.certificate.rstrip() + "\n" + self.ca.rstrip() + "\n")
        key = folder / f"{stem}.key"
        write_private(key, self.private_key.rstrip() + "\n")
        return cert, key


def write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)


class OpenBaoPki:
    def __init__(self, client: hvac.Client, mount: str, common_name: str = "Iris test CA") -> None:
        self.client = client
        self.mount = mount
        client.sys.enable_secrets_engine("pki", path=mount, config={"max_lease_ttl": "87600h"})
        root = client.secrets.pki.generate_root(
            type="internal",
            common_name=common_name,
            extra_params={"ttl": "87600h"},
            mount_point=mount,
        )
        self.ca: str = root["data"]["certificate"]
        client.secrets.pki.create_or_update_role(
            ROLE,
            {
                "allow_any_name": True,
                "allow_ip_sans": True,
                "enforce_hostnames": False,
                "max_ttl": "72h",
                "key_type": "ec",
                "key_bits": 256,
            },
            mount_point=mount,
        )

    def issue(self, common_name: str, ip_sans: list[str] | None = None) -> Issued:
        extra = {"ip_sans": ",".join(ip_sans)} if ip_sans else {}
        reply = self.client.secrets.pki.generate_certificate(
            ROLE, common_name, extra_params={"ttl": "24h", **extra}, mount_point=self.mount
        )
        data = reply["data"]
        return Issued(data["certificate"], data["private_key"], data["issuing_ca"])

    def write_ca(self, path: Path) -> Path:
        path.write_text(self.ca.rstrip() + "\n")
        return path

#!/usr/bin/python
# MIT License (see the role's meta/main.yml).
"""Create or update an AppRole role when its settings differ from the wanted ones."""

# ruff: noqa: E402 (Ansible modules document themselves before their imports)
from __future__ import annotations

DOCUMENTATION = r"""
module: openbao_approle_role
short_description: Manage an OpenBao AppRole role
description:
- Reads C(auth/<mount>/role/<name>) and writes the wanted I(settings) when any differs. Durations
  (keys ending in C(_ttl) or C(_period)) compare in seconds, lists as sets, and CIDR lists (keys
  ending in C(_cidrs)) as sets of networks (OpenBao gives a /32 or /128 back as a bare address).
extends_documentation_fragment:
- iris_openbao
options:
  token:
    description: Token allowed to manage the AppRole mount.
  mount:
    description: AppRole mount path.
    type: str
    default: approle
  name:
    description: Role name.
    type: str
    required: true
  settings:
    description: Role parameters (token_policies, token_ttl, ...).
    type: dict
    default: {}
"""

RETURN = r"""
differences:
  description: The settings that differed.
  type: list
  elements: str
  returned: always
"""

import ipaddress
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.iris_openbao import (
    Client,
    OpenBaoError,
    common_argument_spec,
    seconds,
)


def _items(value: Any) -> list[str]:
    """A list setting as strings (OpenBao also takes and may give one comma-separated string)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return [str(v) for v in value]


def _networks(value: Any) -> set[str]:
    """CIDRs as networks: OpenBao stores token_bound_cidrs' 192.0.2.20/32 as 192.0.2.20 but keeps
    the suffix in secret_id_bound_cidrs, and host bits may be set (strict=False, as OpenBao)."""
    try:
        return {str(ipaddress.ip_network(v, strict=False)) for v in _items(value)}
    except ValueError as exc:
        raise ValueError(f"not a CIDR list: {value!r} ({exc})") from None


def same(key: str, wanted: Any, current: Any) -> bool:
    if key.endswith(("_ttl", "_period")):
        return current is not None and seconds(wanted) == seconds(current)
    if key.endswith("_cidrs"):
        return _networks(wanted) == _networks(current)
    if isinstance(wanted, list):
        return sorted(_items(wanted)) == sorted(_items(current))
    return bool(wanted == current)


def main() -> None:
    spec = common_argument_spec()
    spec.update(
        mount={"type": "str", "default": "approle"},
        name={"type": "str", "required": True},
        settings={"type": "dict", "default": {}},
    )
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    params = module.params
    path = f"auth/{params['mount'].strip('/')}/role/{params['name']}"
    try:
        client = Client(params["url"], params["token"], params["ca_file"])
        current = client.get(path)
        data = {} if current is None else current.get("data") or {}
        try:
            differences = sorted(
                key
                for key, wanted in params["settings"].items()
                if current is None or not same(key, wanted, data.get(key))
            )
        except ValueError as exc:
            module.fail_json(msg=str(exc))
        if current is not None and not differences:
            module.exit_json(changed=False, differences=[])
        if not module.check_mode:
            client.write(path, params["settings"])
    except OpenBaoError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=True, differences=differences)


if __name__ == "__main__":
    main()

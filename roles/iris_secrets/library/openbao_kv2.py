#!/usr/bin/python
# MIT License (see the role's meta/main.yml).
"""Seed KV v2 secrets as {"value": ...} (Iris's layout), writing only missing or changed ones."""

# ruff: noqa: E402 (Ansible modules document themselves before their imports)
from __future__ import annotations

DOCUMENTATION = r"""
module: openbao_kv2
short_description: Seed values into an OpenBao KV v2 mount
description:
- 'For each name in I(values), reads C(<mount>/data/<prefix>/<name>) and writes
  C({"value": <value>}) when it is missing, deleted or different. Values never appear in the
  result; the changed names do.'
extends_documentation_fragment:
- iris_openbao
options:
  token:
    description: Token allowed to read and write the values.
  mount:
    description: KV v2 mount path.
    type: str
    default: secret
  prefix:
    description: Path under the mount.
    type: str
    default: iris
  values:
    description: Name to value.
    type: dict
    default: {}
"""

RETURN = r"""
written:
  description: Names written by this run (or that would be, in check mode).
  type: list
  elements: str
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.iris_openbao import Client, OpenBaoError, common_argument_spec


def main() -> None:
    spec = common_argument_spec()
    spec.update(
        mount={"type": "str", "default": "secret"},
        prefix={"type": "str", "default": "iris"},
        values={"type": "dict", "default": {}, "no_log": True},
    )
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    params = module.params
    base = f"{params['mount'].strip('/')}/data/{params['prefix'].strip('/')}"
    written = []
    try:
        client = Client(params["url"], params["token"], params["ca_file"])
        for name in sorted(params["values"]):
            wanted = {"value": str(params["values"][name])}
            current = client.get(f"{base}/{name}")
            data = ((current or {}).get("data") or {}).get("data")
            if data == wanted:
                continue
            written.append(name)
            if not module.check_mode:
                client.write(f"{base}/{name}", {"data": wanted})
    except OpenBaoError as exc:
        module.fail_json(msg=str(exc), written=written)
    module.exit_json(changed=bool(written), written=written)


if __name__ == "__main__":
    main()

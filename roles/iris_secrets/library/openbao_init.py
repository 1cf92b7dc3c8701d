#!/usr/bin/python
# MIT License (see the role's meta/main.yml).
"""Initialise OpenBao once; report what it would do in check mode."""

# ruff: noqa: E402 (Ansible modules document themselves before their imports)
from __future__ import annotations

DOCUMENTATION = r"""
module: openbao_init
short_description: Initialise an OpenBao server (Shamir seal) once
description:
- Reads C(sys/init); when the server is not initialised yet, initialises it and returns the unseal
  keys and the root token. Already initialised means no change.
- 'The result holds secrets; give the task C(no_log: true).'
extends_documentation_fragment:
- iris_openbao
options:
  token:
    description: Unused.
  secret_shares:
    description: Number of unseal key shares.
    type: int
    default: 1
  secret_threshold:
    description: Shares needed to unseal.
    type: int
    default: 1
"""

RETURN = r"""
init:
  description: C(keys), C(keys_base64) and C(root_token) when this call initialised the server,
    else empty.
  type: dict
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.iris_openbao import Client, OpenBaoError, common_argument_spec


def main() -> None:
    spec = common_argument_spec()
    spec.update(
        secret_shares={"type": "int", "default": 1},
        secret_threshold={"type": "int", "default": 1},
    )
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    params = module.params
    if not 1 <= params["secret_threshold"] <= params["secret_shares"]:
        module.fail_json(msg="secret_threshold must be between 1 and secret_shares")
    try:
        client = Client(params["url"], ca_file=params["ca_file"])
        status = client.get("sys/init") or {}
        if status.get("initialized"):
            module.exit_json(changed=False, init={})
        if module.check_mode:
            module.exit_json(changed=True, init={})
        reply = client.write(
            "sys/init",
            {
                "secret_shares": params["secret_shares"],
                "secret_threshold": params["secret_threshold"],
            },
        )
    except OpenBaoError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(
        changed=True,
        init={
            "keys": reply.get("keys", []),
            "keys_base64": reply.get("keys_base64", []),
            "root_token": reply.get("root_token", ""),
        },
    )


if __name__ == "__main__":
    main()

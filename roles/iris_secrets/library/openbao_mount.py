#!/usr/bin/python
# MIT License (see the role's meta/main.yml).
"""Enable a secrets engine or an auth method at a path, once."""

# ruff: noqa: E402 (Ansible modules document themselves before their imports)
from __future__ import annotations

DOCUMENTATION = r"""
module: openbao_mount
short_description: Enable an OpenBao secrets engine or auth method
description:
- Lists the enabled engines (or auth methods) and enables the wanted one at I(path) when it is
  missing. A different engine already at that path is an error; nothing is ever disabled, since
  that would destroy its data.
extends_documentation_fragment:
- iris_openbao
options:
  token:
    description: Token allowed to manage mounts.
  backend:
    description: Secrets engine or auth method.
    type: str
    choices:
    - secrets
    - auth
    default: secrets
  path:
    description: Mount path without slashes.
    type: str
    required: true
  type:
    description: Engine or method type (kv, approle, ...).
    type: str
    required: true
  description:
    description: Shown in listings.
    type: str
    default: ''
  options:
    description: Engine options (kv wants version 2).
    type: dict
    default: {}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.iris_openbao import Client, OpenBaoError, common_argument_spec


def main() -> None:
    spec = common_argument_spec()
    spec.update(
        backend={"type": "str", "choices": ["secrets", "auth"], "default": "secrets"},
        path={"type": "str", "required": True},
        type={"type": "str", "required": True},
        description={"type": "str", "default": ""},
        options={"type": "dict", "default": {}},
    )
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    params = module.params
    path = params["path"].strip("/")
    wanted_options = {k: str(v) for k, v in params["options"].items()}
    listing = "sys/mounts" if params["backend"] == "secrets" else "sys/auth"
    try:
        client = Client(params["url"], params["token"], params["ca_file"])
        payload = client.get(listing) or {}
        mounts = payload.get("data") or payload
        current = mounts.get(f"{path}/")
        if isinstance(current, dict):
            if current.get("type") != params["type"]:
                module.fail_json(
                    msg=f"{listing}/{path} is a {current.get('type')!r} mount, not "
                    f"{params['type']!r}: move or disable it by hand (it may hold data)"
                )
            options = current.get("options") or {}
            drift = {k: v for k, v in wanted_options.items() if str(options.get(k)) != v}
            if drift:
                module.fail_json(
                    msg=f"{listing}/{path} has options {options}, wanted {wanted_options}: "
                    "upgrade it by hand (for kv 1 -> 2: bao kv enable-versioning)"
                )
            module.exit_json(changed=False)
        if not module.check_mode:
            body = {"type": params["type"], "description": params["description"]}
            if wanted_options:
                body["options"] = wanted_options
            client.write(f"{listing}/{path}", body)
    except OpenBaoError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=True)


if __name__ == "__main__":
    main()

#!/usr/bin/python
# MIT License (see the role's meta/main.yml).
"""Write an ACL policy when it differs from the wanted text."""

# ruff: noqa: E402 (Ansible modules document themselves before their imports)
from __future__ import annotations

DOCUMENTATION = r"""
module: openbao_policy
short_description: Manage an OpenBao ACL policy
description:
- Writes the policy when its text differs (whitespace at the ends ignored); deletes it when absent.
extends_documentation_fragment:
- iris_openbao
options:
  token:
    description: Token allowed to manage policies.
  name:
    description: Policy name.
    type: str
    required: true
  policy:
    description: Policy text (HCL).
    type: str
    default: ''
  state:
    description: Present or absent.
    type: str
    choices:
    - present
    - absent
    default: present
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.iris_openbao import Client, OpenBaoError, common_argument_spec


def main() -> None:
    spec = common_argument_spec()
    spec.update(
        name={"type": "str", "required": True},
        policy={"type": "str", "default": ""},
        state={"type": "str", "choices": ["present", "absent"], "default": "present"},
    )
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    params = module.params
    path = f"sys/policies/acl/{params['name']}"
    try:
        client = Client(params["url"], params["token"], params["ca_file"])
        current = client.get(path)
        text = None if current is None else (current.get("data") or current).get("policy")
        if params["state"] == "absent":
            if text is None:
                module.exit_json(changed=False)
            if not module.check_mode:
                client.request("DELETE", path)
            module.exit_json(changed=True)
        if text is not None and text.strip() == params["policy"].strip():
            module.exit_json(changed=False)
        if not module.check_mode:
            client.write(path, {"policy": params["policy"]})
    except OpenBaoError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=True)


if __name__ == "__main__":
    main()

#!/usr/bin/python
# MIT License (see the role's meta/main.yml).
"""Read one API path (read-only: safe in check mode)."""

# ruff: noqa: E402 (Ansible modules document themselves before their imports)
from __future__ import annotations

DOCUMENTATION = r"""
module: openbao_read
short_description: Read an OpenBao API path
description:
- Read-only, so safe in check mode. A missing path is not an error (I(found) is false).
extends_documentation_fragment:
- iris_openbao
options:
  token:
    description: Token allowed to read the path.
  path:
    description: API path after /v1/.
    type: str
    required: true
"""

RETURN = r"""
found:
  description: False when the path does not exist.
  type: bool
  returned: always
data:
  description: The reply's data (or the whole reply when it has no data object).
  type: dict
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.iris_openbao import Client, OpenBaoError, common_argument_spec


def main() -> None:
    spec = common_argument_spec()
    spec.update(path={"type": "str", "required": True})
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    params = module.params
    try:
        client = Client(params["url"], params["token"], params["ca_file"])
        reply = client.get(params["path"].strip("/"))
    except OpenBaoError as exc:
        module.fail_json(msg=str(exc))
    if reply is None:
        module.exit_json(changed=False, found=False, data={})
    # sys/* endpoints answer at the top level, most others under "data".
    data = reply.get("data") if isinstance(reply.get("data"), dict) else reply
    module.exit_json(changed=False, found=True, data=data)


if __name__ == "__main__":
    main()

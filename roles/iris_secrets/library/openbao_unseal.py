#!/usr/bin/python
# MIT License (see the role's meta/main.yml).
"""Unseal OpenBao through its HTTP API when it is sealed (keys never on a command line)."""

# ruff: noqa: E402 (Ansible modules document themselves before their imports)
from __future__ import annotations

DOCUMENTATION = r"""
module: openbao_unseal
short_description: Unseal an OpenBao server when it is sealed
description:
- Reads C(sys/seal-status); when sealed, submits keys to C(sys/unseal) until it opens.
- Unsealed already means no change; check mode reports the change without submitting keys.
extends_documentation_fragment:
- iris_openbao
options:
  token:
    description: Unused.
  keys:
    description: Unseal keys (hex or base64); at least the threshold.
    type: list
    elements: str
    required: true
  join:
    description:
    - 'The server is a raft follower joining its cluster through C(retry_join): it reports
      itself uninitialised until the keys let it answer the leader''s challenge, so that is no
      error. Retry the task until it succeeds (the first attempts may come before the join).'
    type: bool
    default: false
"""

RETURN = r"""
sealed:
  description: Whether the server is still sealed.
  type: bool
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.iris_openbao import Client, OpenBaoError, common_argument_spec


def main() -> None:
    spec = common_argument_spec()
    spec.update(
        keys={"type": "list", "elements": "str", "required": True, "no_log": True},
        join={"type": "bool", "default": False},
    )
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    try:
        client = Client(module.params["url"], ca_file=module.params["ca_file"])
        status = client.get("sys/seal-status") or {}
        if not status.get("initialized") and not module.params["join"]:
            module.fail_json(msg="OpenBao is not initialised: nothing to unseal")
        if not status.get("sealed"):
            module.exit_json(changed=False, sealed=False)
        if module.check_mode:
            module.exit_json(changed=True, sealed=True)
        if status.get("progress"):
            # Someone left a partial unseal behind: start from a clean slate.
            client.request("PUT", "sys/unseal", {"reset": True})
        for key in module.params["keys"]:
            status = client.request("PUT", "sys/unseal", {"key": key})[1]
            if not status.get("sealed", True):
                module.exit_json(changed=True, sealed=False)
    except OpenBaoError as exc:
        module.fail_json(msg=str(exc))
    module.fail_json(
        msg=(
            f"still sealed after {len(module.params['keys'])} key(s): "
            f"the threshold is {status.get('t')} (progress {status.get('progress')})"
        ),
        sealed=True,
    )


if __name__ == "__main__":
    main()

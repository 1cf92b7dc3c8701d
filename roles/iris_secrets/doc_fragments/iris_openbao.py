# The documentation of the options every module of this role takes (module_utils/iris_openbao's
# common_argument_spec), merged into each module's by `extends_documentation_fragment`. A module
# that documents one of them again overrides what it says: each says what its token is for.
# The role's doc_fragments folder is on Ansible's path when a play loads the role; ansible.cfg
# names it for ansible-doc.
# MIT License (see the role's meta/main.yml).

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  url:
    description: Base URL of the server.
    type: str
    required: true
  ca_file:
    description: CA bundle to verify a TLS server with; empty means the system's.
    type: str
    default: ''
  token:
    description: Token for the API calls.
    type: str
    default: ''
"""

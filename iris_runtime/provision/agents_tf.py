"""``terraform/agents.tf``: one block per Docker agent between marker comments.

A block is a ``module "agent_NAME"`` using ``terraform/modules/agent`` and an output with the
agent's bridge URL and token, rendered in one pass from checked values; blocks are added and cut
out by their markers, leaving the rest of the file as it was.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path

from iris_runtime.errors import InvalidInput, ProvisionError

SECRETS_MODES = ("env", "store", "proxy")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# The registry's own rule (agents/registry.py NAME_RE), so every registered name works here: the
# container is iris-agent-NAME (Docker allows [a-zA-Z0-9][a-zA-Z0-9_.-]*), the module and output
# are agent_NAME (an HCL identifier may hold _ and - after its first letter).
AGENT_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
IMAGE_RESOURCE = "terraform_data.iris_runtime_image"


def check_agent_name(name: str) -> None:
    """InvalidInput unless ``name`` can name a Docker agent (container, module and output)."""
    if not AGENT_NAME.fullmatch(name or ""):
        raise InvalidInput(
            f"agent name {name!r} cannot be used for a container: lowercase letters, digits, "
            "'-' and '_', starting with a letter or digit, at most 63 characters",
            code="invalid_agent_name",
        )


def _hcl_string(value: str) -> str:
    """A quoted HCL string literal: JSON escapes, plus Terraform's template sequences escaped."""
    return json.dumps(value, ensure_ascii=False).replace("${", "$${").replace("%{", "%%{")


def begin_marker(name: str) -> str:
    return f"# >>> iris-agent {name}"


def end_marker(name: str) -> str:
    return f"# <<< iris-agent {name}"


def render_block(
    *,
    name: str,
    bridge_port: int,
    api_port: int,
    data_dir: Path,
    user: str,
    secrets_mode: str,
    unique_token: bool,
    broker_url: str | None,
    extra_env: Mapping[str, str],
) -> str:
    """One agent's block for agents.tf, rendered in a single pass."""
    check_agent_name(name)
    if secrets_mode not in SECRETS_MODES:
        raise ProvisionError(f"secrets mode must be one of {', '.join(SECRETS_MODES)}")
    for key in extra_env:
        if not _ENV_NAME.fullmatch(key):
            raise ProvisionError(f"{name}: {key!r} is not an environment variable name")
    broker = _hcl_string(broker_url) if broker_url else "var.broker_url"
    width = max((len(key) for key in extra_env), default=0)
    env_lines = "".join(
        f"    {key.ljust(width)} = {_hcl_string(value)}\n"
        for key, value in sorted(extra_env.items())
    )
    extra = f"{{\n{env_lines}  }}" if extra_env else "{}"
    return (
        f"{begin_marker(name)}\n"
        f'module "agent_{name}" {{\n'
        f'  source = "./modules/agent"\n'
        f"\n"
        f"  name             = {_hcl_string(name)}\n"
        f"  bridge_port      = {bridge_port}\n"
        f"  api_port         = {api_port}\n"
        f"  image            = local.runtime_image\n"
        f"  image_revision   = local.runtime_image_revision\n"
        f"  data_dir         = {_hcl_string(str(data_dir))}\n"
        f"  user             = {_hcl_string(user)}\n"
        f"  secrets_mode     = {_hcl_string(secrets_mode)}\n"
        f"  unique_api_token = {'true' if unique_token else 'false'}\n"
        f"  env_file         = var.env_file\n"
        f"  broker_url       = {broker}\n"
        f"\n"
        f"  extra_env = {extra}\n"
        f"\n"
        f"  depends_on = [{IMAGE_RESOURCE}]\n"
        f"}}\n"
        f"\n"
        f'output "agent_{name}" {{\n'
        f"  value = {{\n"
        f"    bridge_url = module.agent_{name}.bridge_url\n"
        f"    api_token  = module.agent_{name}.api_token\n"
        f"  }}\n"
        f"  sensitive = true\n"
        f"}}\n"
        f"{end_marker(name)}\n"
    )


def without_block(text: str, name: str) -> tuple[str, bool]:
    """``text`` with agent ``name``'s block cut out, and whether it had one."""
    begin, end = begin_marker(name), end_marker(name)
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    inside = found = False
    for line in lines:
        stripped = line.rstrip("\n")
        if not inside and stripped == begin:
            inside = found = True
            continue
        if inside:
            if stripped == end:
                inside = False
            continue
        out.append(line)
    if inside:
        raise ProvisionError(f"agents.tf: {begin!r} has no matching {end!r}; fix the file by hand")
    # A removed block leaves the blank line that separated it; keep the file tidy.
    joined = "".join(out)
    while "\n\n\n" in joined:
        joined = joined.replace("\n\n\n", "\n\n")
    return (joined.rstrip("\n") + "\n" if joined.strip() else ""), found


def with_block(text: str, name: str, block: str) -> str:
    rest, _ = without_block(text, name)
    return f"{rest}\n{block}" if rest else block

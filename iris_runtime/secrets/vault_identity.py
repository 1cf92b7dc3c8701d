"""A Vault identity per sub-agent: least privilege and revocation without the broker.

The broker already scopes what an agent may read. This goes one step further for agents that
talk to Vault themselves: each gets its own token whose policy grants ``read`` on exactly its
allow-listed secrets and nothing else (no list, no other path, not even Vault's ``default``
policy, beyond looking up and renewing itself). A compromised agent then holds a credential
worth only its own secrets, and revoking it is one call.

Tokens are:

- orphans, so revoking or expiring Iris's own token does not take every agent down with it;
- periodic (renewable forever by the holder, dead a period after it stops renewing), so no
  max-TTL cliff forces a re-issue;
- issued from the token role ``iris-agents``, which may attach only ``iris-agent-*`` policies;
- response-wrapped by default: what leaves Iris is a single-use wrapping token, so an
  interception is detected when the agent's own unwrap fails.

Only the token's accessor is kept (``<data_dir>/secrets/vault-agents.json``, mode 0600): enough to
look the token up or revoke it, useless to read a secret with.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import hvac.exceptions as hvac_errors

from iris_runtime import data_layout
from iris_runtime.agents.registry import NAME_RE
from iris_runtime.errors import InvalidInput, IrisError
from iris_runtime.private_files import file_lock, private_dir, write_private_file
from iris_runtime.secrets.backend import validate_secret_name
from iris_runtime.secrets.vault_connection import VaultConnection, as_dict

if TYPE_CHECKING:
    import hvac

    from iris_runtime.config import Settings

TOKEN_ROLE = "iris-agents"  # noqa: S105 (a role name, not a secret)
POLICY_PREFIX = "iris-agent-"
TOKEN_PERIOD = "24h"  # noqa: S105 (a duration, not a secret)
RECORDS_FILE = "vault-agents.json"

# What an agent token may do besides reading its secrets: know and renew itself (a periodic
# token dies if it is not renewed). Vault's default policy would grant much more.
SELF_SERVICE_RULES = """\
path "auth/token/lookup-self" {
  capabilities = ["read"]
}

path "auth/token/renew-self" {
  capabilities = ["update"]
}
"""


class IdentityRecordsError(IrisError):
    """``vault-agents.json`` exists but is unusable."""

    code = "vault_identity_records_invalid"
    status = 500


@dataclass(frozen=True)
class IssuedToken:
    """A token issued to one agent. Exactly one of ``token`` / ``wrapping_token`` is set.

    ``ttl`` is the issued token's TTL in seconds (its period). The repr masks both tokens.
    """

    agent: str
    accessor: str
    token: str | None
    wrapping_token: str | None
    ttl: int

    def __repr__(self) -> str:
        token = None if self.token is None else "****"
        wrapping = None if self.wrapping_token is None else "****"
        return (
            f"IssuedToken(agent={self.agent!r}, accessor={self.accessor!r}, token={token!r}, "
            f"wrapping_token={wrapping!r}, ttl={self.ttl})"
        )


def policy_name(agent: str) -> str:
    return f"{POLICY_PREFIX}{agent}"


def secrets_path(settings: Settings) -> str:
    """Where the secrets live: the proxy path in proxy mode (as the broker reads them)."""
    if settings.secrets_mode == "proxy":
        return settings.vault_proxy_path or settings.vault_prefix
    return settings.vault_prefix


def policy_rules(mount: str, prefix: str, secrets: Iterable[str]) -> str:
    """HCL granting ``read`` on exactly ``<mount>/data/<prefix>/<NAME>`` for each name.

    Names are validated (letters, digits, ``_ . -``), so they can carry neither a glob (``*``,
    ``+``) nor a quote that would widen or break the policy.
    """
    base = "/".join(p for p in (mount.strip("/"), "data", prefix.strip("/")) if p)
    blocks = [
        f'path "{base}/{validate_secret_name(name)}" {{\n  capabilities = ["read"]\n}}\n'
        for name in dict.fromkeys(secrets)
    ]
    header = "# Managed by Iris: one agent's allow-list. Edits are overwritten.\n"
    return header + "\n".join([*blocks, SELF_SERVICE_RULES])


class AgentVaultIdentity:
    """Issue, look up and revoke per-agent Vault tokens.

    ``client_factory`` returns an authenticated hvac client with the rights to manage policies,
    token roles and tokens; by default Iris's own Vault credentials from ``settings`` are used.
    """

    def __init__(
        self, settings: Settings, client_factory: Callable[[], hvac.Client] | None = None
    ) -> None:
        self._settings = settings
        client = client_factory() if client_factory is not None else None
        self._vault = VaultConnection(settings, client=client)
        self.records_path = settings.data_dir / data_layout.SECRETS_DIR / RECORDS_FILE

    def __repr__(self) -> str:
        return f"AgentVaultIdentity({self._vault.addr!r}, records={str(self.records_path)!r})"

    # -- public API -------------------------------------------------------------------------

    def provision(
        self, agent: str, secrets: Iterable[str], *, wrap_ttl: str | None = "5m"
    ) -> IssuedToken:
        """A new token for ``agent`` reading only ``secrets``; an older one is revoked first."""
        agent = _check_agent(agent)
        names = [validate_secret_name(name) for name in secrets]
        with self._locked():
            records = self._load()
            old = records.get(agent)
            if old is not None:
                self._revoke_accessor(str(old.get("accessor", "")))
            rules = policy_rules(self._settings.vault_mount, secrets_path(self._settings), names)
            self._write_policy(agent, rules)
            self._ensure_role()
            issued = self._create_token(agent, wrap_ttl)
            records[agent] = {
                "accessor": issued.accessor,
                "policy": policy_name(agent),
                "issued_at": datetime.now(UTC).isoformat(timespec="seconds"),
            }
            self._write(records)
        return issued

    def has_token(self, agent: str) -> bool:
        """Whether a token of the agent's own is recorded (read locally, without Vault)."""
        return _check_agent(agent) in self._load()

    def revoke(self, agent: str) -> bool:
        """Revoke the agent's token and delete its policy; False when it had no token.

        Idempotent. The policy is deleted even without a record: a token issued just before a
        crash (never recorded) is left without any permission.
        """
        agent = _check_agent(agent)
        with self._locked():
            records = self._load()
            record = records.pop(agent, None)
            if record is not None:
                self._revoke_accessor(str(record.get("accessor", "")))
            self._vault.call(
                lambda c: _delete_policy(c, policy_name(agent), required=record is not None),
                what=f"the deletion of policy {policy_name(agent)!r}",
            )
            if record is not None:
                self._write(records)
        return record is not None

    def update_policy(self, agent: str, secrets: Iterable[str]) -> bool:
        """Rewrite the agent's policy to its current allow-list, keeping its token; False (and
        nothing written) when the agent has no Vault token."""
        agent = _check_agent(agent)
        names = [validate_secret_name(name) for name in secrets]
        with self._locked():
            if agent not in self._load():
                return False
            rules = policy_rules(self._settings.vault_mount, secrets_path(self._settings), names)
            self._write_policy(agent, rules)
        return True

    def accessor(self, agent: str) -> str | None:
        record = self._load().get(_check_agent(agent))
        return None if record is None else str(record.get("accessor") or "") or None

    def agents(self) -> list[str]:
        return sorted(self._load())

    def close(self) -> None:
        self._vault.close()

    # -- Vault ------------------------------------------------------------------------------

    def _write_policy(self, agent: str, rules: str) -> None:
        name = policy_name(agent)
        self._vault.call(
            lambda c: c.sys.create_or_update_policy(name, rules),
            what=f"the write of policy {name!r}",
        )

    def _ensure_role(self) -> None:
        # Written on every provision (rare, idempotent): a role deleted or loosened by hand
        # is put back as it must be.
        self._vault.call(
            lambda c: c.write_data(f"auth/token/roles/{TOKEN_ROLE}", data=_role_params()),
            what=f"the write of token role {TOKEN_ROLE!r}",
        )

    def _create_token(self, agent: str, wrap_ttl: str | None) -> IssuedToken:
        params = {
            "policies": [policy_name(agent)],
            "display_name": f"iris-agent-{agent}",
            # The role's token_period alone makes the token periodic but leaves "period" out
            # of its lookup; stating it here makes the token say what it is.
            "period": TOKEN_PERIOD,
            "meta": {"iris_agent": agent},
        }
        reply = as_dict(
            self._vault.call(
                lambda c: c.write_data(
                    f"auth/token/create/{TOKEN_ROLE}", data=params, wrap_ttl=wrap_ttl
                ),
                what=f"the creation of a token for agent {agent!r}",
            )
        )
        wrap = reply.get("wrap_info") or {}
        if wrap_ttl is not None:
            accessor = str(wrap.get("wrapped_accessor") or "")
            ttl = self._token_ttl(accessor)
            return IssuedToken(agent, accessor, None, str(wrap.get("token") or ""), ttl)
        auth = reply.get("auth") or {}
        return IssuedToken(
            agent,
            str(auth.get("accessor") or ""),
            str(auth.get("client_token") or ""),
            None,
            int(auth.get("lease_duration") or 0),
        )

    def _token_ttl(self, accessor: str) -> int:
        # A wrapped reply shows only the wrapping token's TTL; ask about the real one.
        reply = as_dict(
            self._vault.call(
                lambda c: c.auth.token.lookup_accessor(accessor),
                what="the lookup of the issued token",
                idempotent=True,
            )
        )
        data = reply.get("data") or {}
        return int(data.get("creation_ttl") or data.get("ttl") or 0)

    def _revoke_accessor(self, accessor: str) -> None:
        if not accessor:
            return
        # An already revoked or expired token answers 204/200 with a warning: not an error.
        self._vault.call(
            lambda c: c.auth.token.revoke_accessor(accessor), what="the revocation of a token"
        )

    # -- the records file -------------------------------------------------------------------

    def _load(self) -> dict[str, dict[str, Any]]:
        try:
            with self.records_path.open("rb") as handle:
                raw = handle.read()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise IdentityRecordsError(
                f"{self.records_path}: cannot read: {exc.strerror}"
            ) from None
        try:
            data = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            data = None
        if not isinstance(data, dict) or not all(
            isinstance(v, dict) and isinstance(v.get("accessor"), str) for v in data.values()
        ):
            raise IdentityRecordsError(
                f"{self.records_path}: not a JSON object of {{agent: {{accessor, ...}}}}; "
                "fix or remove it (revoke leftover tokens in Vault by accessor)"
            )
        return data

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        # The lock spans the Vault calls too: two provisions of one agent must not both leave
        # a live token behind.
        private_dir(self.records_path.parent)
        with file_lock(self.records_path.with_name(self.records_path.name + ".lock")):
            yield

    def _write(self, records: dict[str, dict[str, Any]]) -> None:
        """Atomically replace the records file (caller holds the lock)."""
        data = (json.dumps(dict(sorted(records.items())), indent=2) + "\n").encode("utf-8")
        write_private_file(self.records_path, data)


def _role_params() -> dict[str, object]:
    return {
        "allowed_policies_glob": [f"{POLICY_PREFIX}*"],
        "disallowed_policies": ["root", "default"],
        "orphan": True,
        "renewable": True,
        "token_period": TOKEN_PERIOD,
        "token_no_default_policy": True,
        "token_type": "service",  # batch tokens cannot be renewed or revoked by accessor
    }


def _check_agent(agent: str) -> str:
    if not isinstance(agent, str) or not NAME_RE.fullmatch(agent):
        raise InvalidInput(
            f"invalid agent name {agent!r}: use 1-63 of a-z, 0-9, '_' and '-', "
            "starting with a letter or digit"
        )
    return agent


def _delete_policy(client: hvac.Client, name: str, *, required: bool) -> None:
    """Delete ``name``; without a recorded token a refusal means there is nothing to clean up.

    A broker whose policy may not write ``sys/policies`` (the least-privilege default of the
    Ansible role) can never have issued an agent token, so removing an agent must not fail on it.
    """
    try:
        client.sys.delete_policy(name)
    except hvac_errors.Forbidden:
        if required:
            raise

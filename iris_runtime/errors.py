"""The project's exception types.

Every error a client can cause carries a stable machine-readable ``code`` and the HTTP status it
maps to, so the web layer turns them into ``{"error", "code"}`` bodies without a lookup table.
"""


class IrisError(Exception):
    """Base class for every error Iris raises on purpose."""

    code = "internal_error"
    status = 500

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def response_headers(self) -> dict[str, str]:
        """HTTP headers that carry part of this error's meaning (``Retry-After``, ...)."""
        return {}


class ConfigError(IrisError):
    """The configuration (environment, files) is unusable."""

    code = "config_error"


class InvalidInput(IrisError):
    """A request or file carried something we refuse to act on."""

    code = "invalid_input"
    status = 400


class NotFound(IrisError):
    code = "not_found"
    status = 404


class NoSuchChannel(NotFound):
    """A channel id has a transport's shape but names no channel of it (malformed, unknown)."""

    code = "no_such_channel"


class TransportNotRunning(IrisError):
    """A channel id belongs to a transport that is installed but not running in this process
    (no credentials configured): nothing may be delivered there, not even by the catch-all."""

    code = "transport_not_running"
    status = 409


class Unauthorized(IrisError):
    code = "unauthorized"
    status = 401


class PayloadTooLarge(IrisError):
    code = "payload_too_large"
    status = 413


class QueueFull(IrisError):
    """A channel already has a run and a full queue of waiting messages."""

    code = "queue_full"
    status = 429


class TooManyObservers(IrisError):
    code = "too_many_streams"
    status = 429


class PromptProfileMissing(IrisError):
    """A run was dispatched on a transport that never registered its prompt profile."""

    code = "prompt_profile_missing"


class ProviderUnavailable(IrisError):
    code = "provider_unavailable"


class EngineStopping(IrisError):
    code = "shutting_down"
    status = 503


class ProvisionError(IrisError):
    """Running a sub-agent failed: a unit, a supervised process, a container, Terraform."""

    code = "provision_failed"

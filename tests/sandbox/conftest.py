"""The private dockerd of the Docker tests (session-scoped), for the docker level's tests."""

from tests.provisioning.dockerd import dockerd  # noqa: F401 (a fixture, used by name)

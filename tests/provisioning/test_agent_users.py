"""Agent user names: ``<prefix>-<agent>``, cut with a hash suffix past 32 characters."""

from __future__ import annotations

import pytest

from iris_runtime.errors import ProvisionError
from iris_runtime.provision.agent_users import USER_NAME_MAX, agent_user_name, unit_user


def test_a_short_name_is_kept_whole() -> None:
    assert agent_user_name("iris-agent", "digest") == "iris-agent-digest"
    assert agent_user_name("iris-agent", "a" * 21) == "iris-agent-" + "a" * 21  # exactly 32


def test_a_long_name_is_cut_with_a_hash_of_the_whole_name() -> None:
    first = agent_user_name("iris-agent", "weather-report-for-the-northern-coast")
    second = agent_user_name("iris-agent", "weather-report-for-the-northern-coast-2")
    assert len(first) <= USER_NAME_MAX and len(second) <= USER_NAME_MAX
    assert first.startswith("iris-agent-weather-rep")
    assert first != second  # same cut, different hash
    assert agent_user_name("iris-agent", "weather-report-for-the-northern-coast") == first
    assert agent_user_name("iris-agent", "x" * 63).count("-") == 3  # no doubled separator


def test_a_prefix_that_leaves_no_room_is_refused() -> None:
    with pytest.raises(ProvisionError, match="too long"):
        agent_user_name("p" * 25, "x" * 30)


def test_the_installed_user_is_read_from_the_unit() -> None:
    assert unit_user("[Service]\nUser=iris-agent-digest\nGroup=x\n") == "iris-agent-digest"
    assert unit_user("[Service]\nExecStart=/bin/true\n") is None

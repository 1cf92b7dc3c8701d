"""The held-request budget on its own (the served behaviour is in test_held_requests.py)."""

from __future__ import annotations

import threading

import pytest

from iris_runtime.web.capacity import STREAMS, WAITS, AtCapacity, HeldRequests


def test_each_kind_has_its_own_limit_and_a_refusal_says_which() -> None:
    budget = HeldRequests({STREAMS: 2, WAITS: 1})
    streams = [budget.hold(STREAMS), budget.hold(STREAMS)]
    wait = budget.hold(WAITS)
    with pytest.raises(AtCapacity) as refused:
        budget.hold(STREAMS)
    assert refused.value.status == 503 and refused.value.code == "at_capacity"
    assert refused.value.response_headers() == {"Retry-After": "5"}
    assert "IRIS_MAX_STREAMS" in refused.value.message
    with pytest.raises(AtCapacity, match="IRIS_MAX_WAITS"):
        budget.hold(WAITS)
    assert budget.in_use() == {STREAMS: (2, 2), WAITS: (1, 1)}
    streams[0].release()
    streams[0].release()  # a response closed twice gives its slot back once
    wait.release()
    assert budget.in_use() == {STREAMS: (1, 2), WAITS: (0, 1)}
    with budget.hold(WAITS):
        assert budget.in_use()[WAITS] == (1, 1)
    assert budget.in_use()[WAITS] == (0, 1)


def test_concurrent_holds_never_exceed_the_limit() -> None:
    budget = HeldRequests({STREAMS: 50, WAITS: 1})
    granted: list[object] = []
    lock = threading.Lock()

    def grab() -> None:
        for _ in range(20):
            try:
                slot = budget.hold(STREAMS)
            except AtCapacity:
                continue
            with lock:
                granted.append(slot)

    threads = [threading.Thread(target=grab) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(granted) == 50 and budget.in_use()[STREAMS] == (50, 50)

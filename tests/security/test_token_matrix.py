"""Every cell of the token matrix (``token_matrix.MATRIX``) against served processes.

One Iris (``iris serve`` with the Web UI on, two custom agents in ``agents.d``) with two
sub-agents registered through ``iris agents register``, each with its own token and secrets
allow-list: A is a real sub-agent runtime (its bridge answers the bridge rows), B only a
registration (``matrix_served``). One request per cell, each with a body the route accepts, so
the status is the auth decision and not a 400; each aimed at a target of its own (a session, a
channel, a secret name, an event) so that a refused request can be shown to have changed
nothing, and an allowed one to have done its work (``matrix_exercises``), which proves the
check can see a change.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from tests.security.matrix_exercises import EXERCISES, Exercise
from tests.security.matrix_requests import Answer, send
from tests.security.matrix_served import DEADLINE, Served, serve_matrix
from tests.security.token_matrix import API, CALLERS, MATRIX, WEBUI, Decision, Row


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serve_matrix(tmp_path_factory.mktemp("matrix")) as processes:
        yield processes


def eventually(check: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + DEADLINE
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


# -- the tests -----------------------------------------------------------------------------------

CELLS = [(row, caller) for row in MATRIX for caller in CALLERS]


@pytest.mark.parametrize(("row", "caller"), CELLS, ids=[f"{r.key} | {c}" for r, c in CELLS])
def test_cell(served: Served, row: Row, caller: str) -> None:
    expected = row.decision(caller)
    exercise = EXERCISES[row.key]
    call = exercise.call(served, caller)
    answer = send(served, row, caller, call)
    where = f"{row.key} as {caller}"
    got = (answer.status, answer.code, answer.close_code)
    assert got == (expected.status, expected.code, expected.close_code), where
    check_refusal_headers(row, expected, answer, where)
    if exercise.effect is not None:
        check_effect(served, exercise, expected, caller, where)


def check_refusal_headers(row: Row, expected: Decision, answer: Answer, where: str) -> None:
    """A bearer listener's 401 names its scheme: exactly so on the API (docs/openapi.yaml),
    ``Bearer`` on the bridge (docs/bridge.md)."""
    if expected.status != 401 or row.listener == WEBUI:
        return
    challenge = answer.headers.get("WWW-Authenticate", "")
    if row.listener == API:
        assert challenge == 'Bearer realm="iris"', where
    else:
        assert challenge.startswith("Bearer"), where


def check_effect(
    served: Served, exercise: Exercise, expected: Decision, caller: str, where: str
) -> None:
    def changed() -> bool:
        assert exercise.effect is not None
        return exercise.effect(served, caller)

    if expected.allowed:
        # Asynchronous work (a run on a channel, a fired event) shows in time.
        assert eventually(changed), f"{where}: allowed, but its work never showed"
    else:
        assert not changed(), f"{where}: refused, yet it changed something"
        if exercise.asynchronous:
            served.refused_effects[where] = changed


def test_refused_cells_left_nothing_behind_later(served: Served) -> None:
    """Asynchronous work (a run, a fired event) could show after a refusal was answered: those
    refused cells are looked at again, once all the cells (and their runs) are done."""
    if not served.refused_effects:
        pytest.skip("no refused cell of a route with asynchronous work ran in this session")
    time.sleep(0.5)  # the event watcher schedules within a second
    late = [where for where, changed in served.refused_effects.items() if changed()]
    assert late == []


def test_every_row_has_an_exercise() -> None:
    keys = [row.key for row in MATRIX]
    assert len(keys) == len(set(keys)), "two rows with one key: tell them apart by their case"
    assert set(keys) == set(EXERCISES)

"""What ``with`` means for the things tests bring up (servers, containers, network namespaces).

``with thing:`` brings the thing up and always takes it down again, also when bringing it up
fails half-way: a namespace made before its link failed, a node started before its neighbour
failed, a process spawned before it answered. Without that, a failed ``__enter__`` (after which
Python never calls ``__exit__``) leaks exactly what a test suite cannot afford to leak.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Self


class Scoped(ABC):
    """A thing a test brings up for the span of a ``with`` block; subclasses say how."""

    @abstractmethod
    def _bring_up(self) -> None:
        """Start what ``with`` starts (the class's own ``start()``/``create()``)."""

    @abstractmethod
    def _take_down(self) -> None:
        """Undo it, whatever part of it has been done; doing it twice does nothing."""

    def __enter__(self) -> Self:
        try:
            self._bring_up()
        except BaseException:
            self._take_down()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._take_down()

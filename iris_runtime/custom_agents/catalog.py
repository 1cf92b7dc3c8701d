"""The folder of manifests (``agents.d``): loaded in filename order, watched for new files.

A loaded file is never re-read behind the operator's back: editing or removing it takes effect
when that agent is restarted (:meth:`Catalog.restart`). A skipped file is looked at again when it
changes (its inode, size, mtime or ctime), so fixing a typo needs no restart, and when the kind it
clashed with is free again (that agent restarted away, that sub-agent unregistered). Every skip is
logged once, in the spec's words: ``agent manifest <path> skipped: <reason>``.

A bridge sub-agent registered later under a loaded kind wins: on the next scan the custom agent
is unloaded and its file listed as skipped, so ``@kind`` and the agent lists agree on who it is.
Only regular files are read, and never waited on (a FIFO named ``x.json`` is skipped).
"""

from __future__ import annotations

import logging
import os
import stat
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

from iris_runtime.custom_agents.manifest import (
    MAX_MANIFEST_BYTES,
    Manifest,
    ManifestError,
    parse_manifest,
    reserved_reason,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadedAgent:
    manifest: Manifest
    path: Path


@dataclass(frozen=True)
class Skipped:
    path: Path
    reason: str
    clash: str | None = None  # the kind it lost to another file or a sub-agent, if that is why


Stamp = tuple[int, int, int, int]  # (inode, size, mtime_ns, ctime_ns): "has the file changed"


class Catalog:
    def __init__(self, directory: Path, reserved: Callable[[], Collection[str]]) -> None:
        self.directory = directory
        self._reserved = reserved  # names taken elsewhere (bridge sub-agents), asked per load
        self._loaded: dict[str, LoadedAgent] = {}
        self._skipped: dict[Path, tuple[Stamp, Skipped]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- reading ------------------------------------------------------------------------------

    def get(self, kind: str) -> LoadedAgent | None:
        return self._loaded.get(kind)

    def kinds(self) -> frozenset[str]:
        return frozenset(self._loaded)

    def loaded(self) -> list[LoadedAgent]:
        with self._lock:
            return sorted(self._loaded.values(), key=lambda a: a.path.name)

    def skipped(self) -> list[Skipped]:
        with self._lock:
            return sorted((s for _, s in self._skipped.values()), key=lambda s: s.path.name)

    # -- loading ------------------------------------------------------------------------------

    def scan(self) -> None:
        """Load every file not loaded yet: new ones, skipped ones that changed since, and those
        that lost a clash that is now gone; unload an agent whose kind a sub-agent has taken."""
        with self._lock:
            reserved = frozenset(self._reserved())
            for kind in sorted(self._loaded.keys() & reserved):
                agent = self._loaded[kind]
                self._loaded = {k: v for k, v in self._loaded.items() if k != kind}
                self._skip(agent.path, _stamp(agent.path), reserved_reason(kind), kind)
            loaded_paths = {a.path for a in self._loaded.values()}
            files = self._files()
            for gone in self._skipped.keys() - set(files):
                del self._skipped[gone]
            for path in files:
                if path in loaded_paths:
                    continue
                stamp = _stamp(path)
                earlier = self._skipped.get(path)
                if (
                    earlier is not None
                    and earlier[0] == stamp
                    and not self._free(earlier[1], reserved)
                ):
                    continue
                self._consider(path, stamp, reserved)

    def _free(self, skipped: Skipped, reserved: Collection[str]) -> bool:
        """Whether the kind ``skipped`` clashed on is taken by nothing any more."""
        clash = skipped.clash
        return clash is not None and clash not in self._loaded and clash not in reserved

    def restart(self, kind: str) -> LoadedAgent | None:
        """Forget ``kind`` and read its file again (gone or now invalid: it stays unloaded).
        Returns the agent as it is now; raises KeyError for a kind that is not loaded."""
        with self._lock:
            agent = self._loaded[kind]
            self._loaded = {k: v for k, v in self._loaded.items() if k != kind}
            self._skipped.pop(agent.path, None)
            if agent.path.exists():
                self._consider(agent.path, _stamp(agent.path), frozenset(self._reserved()))
            log.info("custom agent %s restarted", kind)
        self.scan()  # a file that lost "kind" to this one may have it now
        return self._loaded.get(kind)

    def _files(self) -> list[Path]:
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        # Filename order decides which of two files naming one kind wins; editors' dot-files wait.
        return [self.directory / n for n in sorted(names) if n.endswith(".json") and n[0] != "."]

    def _consider(self, path: Path, stamp: Stamp, reserved: Collection[str]) -> None:
        try:
            manifest = parse_manifest(_read(path))
        except ManifestError as exc:
            self._skip(path, stamp, str(exc))
            return
        except NotRegular:
            self._skip(path, stamp, "not a regular file")
            return
        except OSError as exc:
            self._skip(path, stamp, f"unreadable: {exc.strerror or exc}")
            return
        kind = manifest.kind
        if kind in reserved:
            self._skip(path, stamp, reserved_reason(kind), kind)
            return
        holder = self._loaded.get(kind)
        if holder is not None:
            self._skip(path, stamp, f'"kind" {kind!r} is already loaded from {holder.path}', kind)
            return
        self._skipped.pop(path, None)
        # Replaced, never changed in place: runs read it without the lock (see engine.tools).
        self._loaded = {**self._loaded, kind: LoadedAgent(manifest, path)}
        log.info("agent manifest %s loaded: %s (%s)", path, kind, manifest.shape)

    def _skip(self, path: Path, stamp: Stamp, reason: str, clash: str | None = None) -> None:
        earlier = self._skipped.get(path)
        self._skipped[path] = (stamp, Skipped(path, reason, clash))
        if earlier is None or earlier[1].reason != reason:  # once, not on every re-check
            log.warning("agent manifest %s skipped: %s", path, reason)

    # -- watching -----------------------------------------------------------------------------

    def watch(self, interval: float) -> None:
        """Scan now, then every ``interval`` seconds on a thread until :meth:`stop_watching`."""
        self.scan()
        self._thread = threading.Thread(
            target=self._watch, args=(interval,), name="agents.d watcher", daemon=True
        )
        self._thread.start()

    def _watch(self, interval: float) -> None:
        while not self._stop.wait(interval):
            try:
                self.scan()
            except Exception:  # a bad moment on disk must not end the watching
                log.exception("scanning %s failed", self.directory)

    def stop_watching(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)


class NotRegular(Exception):
    """The path is a FIFO, a device or a folder: nothing to read a manifest from."""


def _stamp(path: Path) -> Stamp:
    try:
        info = path.stat()
    except OSError:
        return (0, 0, 0, 0)
    return (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def _read(path: Path) -> bytes:
    # Non-blocking, so a FIFO cannot hold the catalog's lock; only a regular file is read.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegular
        data = file.read(MAX_MANIFEST_BYTES + 1)  # parse_manifest refuses the oversized
    return data

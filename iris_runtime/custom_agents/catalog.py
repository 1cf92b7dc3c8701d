"""The folder of manifests (``agents.d``): loaded in filename order, watched for new files.

A loaded file is never re-read behind the operator's back: editing or removing it takes effect
when that agent is restarted (:meth:`Catalog.restart`). A skipped file is looked at again when it
changes, so fixing a typo needs no restart. Every skip is logged once, in the spec's words:
``agent manifest <path> skipped: <reason>``.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

from iris_runtime.custom_agents.manifest import (
    MAX_MANIFEST_BYTES,
    Manifest,
    ManifestError,
    parse_manifest,
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


class Catalog:
    def __init__(self, directory: Path, reserved: Callable[[], Collection[str]]) -> None:
        self.directory = directory
        self._reserved = reserved  # names taken elsewhere (bridge sub-agents), asked per load
        self._loaded: dict[str, LoadedAgent] = {}
        self._skipped: dict[Path, tuple[int, Skipped]] = {}  # path -> (mtime_ns, why)
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
        """Load every file not loaded yet (and every skipped file that changed since)."""
        with self._lock:
            loaded_paths = {a.path for a in self._loaded.values()}
            for path in self._files():
                if path in loaded_paths:
                    continue
                mtime = _mtime(path)
                earlier = self._skipped.get(path)
                if earlier is not None and earlier[0] == mtime:
                    continue
                self._consider(path, mtime)

    def restart(self, kind: str) -> LoadedAgent | None:
        """Forget ``kind`` and read its file again (gone or now invalid: it stays unloaded).
        Returns the agent as it is now; raises KeyError for a kind that is not loaded."""
        with self._lock:
            agent = self._loaded[kind]
            self._loaded = {k: v for k, v in self._loaded.items() if k != kind}
            self._skipped.pop(agent.path, None)
            if agent.path.exists():
                self._consider(agent.path, _mtime(agent.path))
            log.info("custom agent %s restarted", kind)
        self.scan()
        return self._loaded.get(kind)

    def _files(self) -> list[Path]:
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        # Filename order decides which of two files naming one kind wins; editors' dot-files wait.
        return [self.directory / n for n in sorted(names) if n.endswith(".json") and n[0] != "."]

    def _consider(self, path: Path, mtime: int) -> None:
        try:
            manifest = parse_manifest(_read(path), self._reserved())
        except ManifestError as exc:
            self._skip(path, mtime, str(exc))
            return
        except OSError as exc:
            self._skip(path, mtime, f"unreadable: {exc.strerror or exc}")
            return
        holder = self._loaded.get(manifest.kind)
        if holder is not None:
            self._skip(
                path, mtime, f'"kind" {manifest.kind!r} is already loaded from {holder.path}'
            )
            return
        self._skipped.pop(path, None)
        # Replaced, never changed in place: runs read it without the lock (see engine.tools).
        self._loaded = {**self._loaded, manifest.kind: LoadedAgent(manifest, path)}
        log.info("agent manifest %s loaded: %s (%s)", path, manifest.kind, manifest.shape)

    def _skip(self, path: Path, mtime: int, reason: str) -> None:
        self._skipped[path] = (mtime, Skipped(path, reason))
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


def _mtime(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return 0


def _read(path: Path) -> bytes:
    with path.open("rb") as file:
        data = file.read(MAX_MANIFEST_BYTES + 1)  # parse_manifest refuses the oversized
    return data

"""The watcher: notices event files appearing, changing and disappearing, and says so once.

It polls (no platform file-notification API, so it behaves the same on every filesystem, bind
mounts included). Each file is remembered by ``(mtime_ns, size, inode)`` and only read again when
that changes. Two tiers keep polling cheap with thousands of files:

* every poll stats each watched folder; a folder whose own ``(mtime_ns, inode)`` changed (a file
  was created, removed or atomically replaced) is rescanned at once;
* a full pass over every file, which also catches in-place edits that leave the folder's mtime
  alone, runs every poll while it is cheap and is spaced out to stay under ~2% of one core
  when it is not (a 10,000-file folder: about once a second).

A file that does not parse is retried for a grace period before it is rejected, because a writer
that does not write atomically shows it half-written first. A rejection writes the reason next to
the file (``<file>.error``); fixing the file removes that note. Nothing here deletes an event file.

Only real folders inside the data dir are scanned: a symlinked event folder would make Iris read
and consume files that live elsewhere, so it is refused with a warning. Names are never followed
either: an event file must be a regular file, and a reason file is read bounded, without
following a symlink or blocking on a FIFO. One file that cannot be handled is rejected alone; the
rest of its folder is scanned as usual.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Protocol

from iris_runtime.errors import InvalidInput
from iris_runtime.events.files import (
    ERROR_SUFFIX,
    EventSpec,
    Folder,
    digest,
    error_path,
    folder_problem,
    is_event_file_name,
    is_ignored_name,
    parse_event_bytes,
    read_bounded,
    write_reason,
)
from iris_runtime.events.schedule import Clock

log = logging.getLogger(__name__)

# (mtime_ns, size, inode): a file's version as far as polling can tell.
Signature = tuple[int, int, int]
# How much of one core the full pass may use, as the ratio of its duration to its spacing.
FULL_PASS_BUDGET = 50
# A folder changed this recently may change again within the same timestamp tick, unseen.
_RACY_NS = 2_000_000_000


class EventSink(Protocol):
    """Where the watcher reports (the event service)."""

    def on_event(self, rel: str, folder: Folder, spec: EventSpec, file_digest: str) -> str | None:
        """A file holds this (new or changed) event; return a reason to reject it, or None."""
        ...

    def on_gone(self, rel: str) -> None:
        """The file is gone, or no longer holds a valid event: cancel what it scheduled."""
        ...


@dataclass
class _File:
    signature: Signature
    status: str  # "ok" | "rejected" | "retrying"
    first_failure: datetime | None = None
    reason: str = ""


@dataclass
class _FolderState:
    signature: tuple[int, int] | None = None
    racy: bool = True
    problem: str | None = None  # why the folder is not used (a symlink), as last logged


class Watcher:
    """Scans the watched folders; :meth:`scan_once` is synchronous so tests drive it directly."""

    def __init__(
        self,
        data_dir: Path,
        folders: list[Folder],
        sink: EventSink,
        clock: Clock,
        *,
        grace: timedelta = timedelta(seconds=1),
    ) -> None:
        self.data_dir = data_dir
        self.folders = list(folders)
        self._sink = sink
        self._clock = clock
        self._grace = grace
        self._files: dict[str, _File] = {}
        self._folder_state: dict[str, _FolderState] = {f.rel: _FolderState() for f in folders}
        self._noted: set[str] = set()  # non-event names already logged once
        self.full_pass_seconds = 0.0

    # -- scanning -------------------------------------------------------------------------------

    def scan_once(self) -> None:
        """A full pass: every file of every folder."""
        started = time.perf_counter()
        for folder in self.folders:
            self._scan_folder(folder)
        self.full_pass_seconds = time.perf_counter() - started

    def poll_once(self) -> None:
        """The cheap tier: rescan only folders that changed, and re-read files being retried."""
        for folder in self.folders:
            if self._folder_changed(folder):
                self._scan_folder(folder)
        self._retry_failures()

    def full_pass_interval(self, poll: float) -> float:
        return max(poll, self.full_pass_seconds * FULL_PASS_BUDGET)

    def _folder_changed(self, folder: Folder) -> bool:
        state = self._folder_state[folder.rel]
        try:
            # lstat: a folder swapped for a symlink (or back) is a change too.
            st = os.lstat(self.data_dir / folder.rel)
            signature: tuple[int, int] | None = (st.st_mtime_ns, st.st_ino)
        except OSError:
            signature = None
        return state.racy or signature != state.signature

    def _scan_folder(self, folder: Folder) -> None:
        directory = self.data_dir / folder.rel
        state = self._folder_state[folder.rel]
        seen: dict[str, Signature] = {}
        errors: set[str] = set()
        prefix = folder.rel + "/"
        # Only names noted before need to be looked for (most passes note nothing).
        noted = {r for r in self._noted if r.startswith(prefix)}
        try:
            st = os.lstat(directory)
            state.signature = (st.st_mtime_ns, st.st_ino)
            # A folder changed this very moment may change again unseen within the same tick;
            # one stamped in the future (clock skew) cannot: any change stamps it with now.
            state.racy = 0 <= time.time_ns() - st.st_mtime_ns < _RACY_NS
            if self._usable(folder, state):
                with os.scandir(directory) as entries:
                    for entry in entries:
                        if noted:
                            noted.discard(prefix + entry.name)
                        self._classify(folder, entry, seen, errors)
        except FileNotFoundError:
            state.signature, state.racy = None, False
        except OSError as exc:
            log.warning("events: cannot scan %s/: %s", folder.rel, exc)
            return
        for rel in [r for r in self._files if r.startswith(prefix) and r not in seen]:
            self._gone(rel)
        # Names noted once and no longer there are forgotten (the set would only grow).
        self._noted -= noted
        for rel, signature in seen.items():
            self._guarded_check(rel, folder, signature, has_error=f"{rel}{ERROR_SUFFIX}" in errors)
        for rel in errors:
            self._drop_orphan_error(self.data_dir / rel)

    def _usable(self, folder: Folder, state: _FolderState) -> bool:
        """Whether the folder may be scanned; a symlinked one is refused (its files, if any were
        scheduled, count as gone), and said so once per change."""
        problem = folder_problem(self.data_dir, folder)
        if problem != state.problem:
            if problem is not None:
                log.warning("events: not watching %s/: %s", folder.rel, problem)
            elif state.problem is not None:
                log.info("events: watching %s/ again", folder.rel)
            state.problem = problem
        return problem is None

    def _classify(
        self, folder: Folder, entry: os.DirEntry[str], seen: dict[str, Signature], errors: set[str]
    ) -> None:
        name = entry.name
        if name.endswith(ERROR_SUFFIX) and not name.startswith("."):
            # Only a regular file can be a reason we wrote; anything else is left alone.
            if entry.is_file(follow_symlinks=False):
                errors.add(f"{folder.rel}/{name}")
            return
        if is_ignored_name(name):
            return
        rel = f"{folder.rel}/{name}"
        if not is_event_file_name(name) or not entry.is_file(follow_symlinks=False):
            self._note_once(rel, "is not an event file (event files are regular *.json files)")
            return
        try:
            st = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            return  # removed while we looked: the next pass reports it gone
        seen[rel] = (st.st_mtime_ns, st.st_size, st.st_ino)

    def _retry_failures(self) -> None:
        for rel, known in list(self._files.items()):
            if known.status != "retrying":
                continue
            folder = next(f for f in self.folders if rel.startswith(f.rel + "/"))
            if self._folder_state[folder.rel].problem is not None:
                continue  # the next scan of that folder reports its files gone
            try:
                st = os.stat(self.data_dir / rel, follow_symlinks=False)
            except FileNotFoundError:
                self._gone(rel)
                continue
            signature = (st.st_mtime_ns, st.st_size, st.st_ino)
            has_error = error_path(self.data_dir / rel).exists()
            self._guarded_check(rel, folder, signature, has_error=has_error)

    # -- one file -------------------------------------------------------------------------------

    def _guarded_check(
        self, rel: str, folder: Folder, signature: Signature, *, has_error: bool
    ) -> None:
        """:meth:`_check`, with any failure confined to this one file: an unexpected error would
        otherwise end the pass, and every file after it in the folder would never be scheduled."""
        try:
            self._check(rel, folder, signature, has_error=has_error)
        except Exception as exc:
            log.exception("events: handling %s failed", rel)
            self._sink.on_gone(rel)
            self._reject(rel, signature, f"cannot be handled: {type(exc).__name__}: {exc}")

    def _check(self, rel: str, folder: Folder, signature: Signature, *, has_error: bool) -> None:
        known = self._files.get(rel)
        if known is not None and known.signature == signature and known.status != "retrying":
            return
        path = os.path.join(self.data_dir, rel)
        try:
            raw = read_bounded(path)
            spec = parse_event_bytes(raw)
        except FileNotFoundError:
            return
        except (InvalidInput, OSError) as exc:
            problem = exc.message if isinstance(exc, InvalidInput) else f"unreadable: {exc}"
            self._failed(rel, signature, known, problem)
            return
        refusal = self._sink.on_event(rel, folder, spec, digest(raw))
        if refusal is not None:
            self._reject(rel, signature, refusal)
            return
        self._files[rel] = _File(signature, "ok")
        if has_error:
            self._clear_error(Path(path))

    def _failed(self, rel: str, signature: Signature, known: _File | None, reason: str) -> None:
        now = self._clock.now()
        if known is None or known.status != "retrying" or known.signature != signature:
            # A new version: give its writer the grace period to finish.
            self._files[rel] = _File(signature, "retrying", now, reason)
            return
        assert known.first_failure is not None
        if now - known.first_failure >= self._grace:
            self._sink.on_gone(rel)
            self._reject(rel, signature, reason)

    def _reject(self, rel: str, signature: Signature, reason: str) -> None:
        known = self._files.get(rel)
        self._files[rel] = _File(signature, "rejected", reason=reason)
        if known is not None and known.status == "rejected" and known.reason == reason:
            return
        log.warning("events: rejected %s: %s (reason in %s%s)", rel, reason, rel, ERROR_SUFFIX)
        try:
            write_reason(self.data_dir / rel, reason)
        except OSError as exc:
            log.error("events: cannot write the reason for %s: %s", rel, exc)

    def _gone(self, rel: str) -> None:
        self._files.pop(rel, None)
        self._sink.on_gone(rel)
        self._clear_error(self.data_dir / rel)

    def _clear_error(self, path: Path) -> None:
        reason = error_path(path)
        try:
            reason.unlink()
            log.info("events: %s is valid now; removed %s", path.name, reason.name)
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("events: cannot remove %s: %s", reason, exc)

    def _drop_orphan_error(self, path: Path) -> None:
        # Our own note about a file that no longer exists (deleted while Iris was down).
        event = path.with_name(path.name[: -len(ERROR_SUFFIX)])
        if is_event_file_name(event.name) and not os.path.lexists(event):
            try:
                path.unlink(missing_ok=True)
            except OSError as exc:
                self._note_once(str(path.relative_to(self.data_dir)), f"cannot be removed: {exc}")

    def _note_once(self, rel: str, why: str) -> None:
        if rel not in self._noted:
            self._noted.add(rel)
            log.info("events: ignoring %s: it %s", rel, why)


class WatcherThread:
    """Runs a :class:`Watcher` every ``poll`` seconds until stopped."""

    def __init__(
        self, watcher: Watcher, poll: float, on_ready: Callable[[], None] | None = None
    ) -> None:
        self._watcher = watcher
        self._poll = poll
        self._on_ready = on_ready
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="iris-events-watcher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _loop(self) -> None:
        self._guarded(self._watcher.scan_once)
        if self._on_ready is not None:
            self._on_ready()
        next_full = time.monotonic() + self._watcher.full_pass_interval(self._poll)
        while not self._stop.wait(self._poll):
            if time.monotonic() >= next_full:
                self._guarded(self._watcher.scan_once)
                next_full = time.monotonic() + self._watcher.full_pass_interval(self._poll)
            else:
                self._guarded(self._watcher.poll_once)

    @staticmethod
    def _guarded(scan: Callable[[], None]) -> None:
        try:
            scan()
        except Exception:
            # One bad pass must not end watching for good; the next pass starts clean.
            log.exception("events: a scan failed")

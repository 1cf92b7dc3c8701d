"""The sub-agent side of the bridge: turn a request into a run and its events into a job log.

The run's context is private to the request (its replies accumulate, its status lines go to the
job log); its conversation lives in the session the conversation key maps to, so repeated
requests from one origin continue one context.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
import uuid
from pathlib import Path

from iris_runtime.bridge.jobs import Job, JobStore
from iris_runtime.bridge.protocol import ONE_OFF_PREFIX, BridgeRequest, conversation_session
from iris_runtime.bridge.transport import BridgeTransport
from iris_runtime.config import Settings
from iris_runtime.engine.channels import SESSION_PREFIX, session_channel
from iris_runtime.engine.runs import RunResult
from iris_runtime.engine.sessions import LOG_NAME
from iris_runtime.engine.transport import TransportEvent, clip_status
from iris_runtime.engine.usage import usage_to_json
from iris_runtime.errors import IrisError

log = logging.getLogger(__name__)

NO_REPLY = "(no reply: the run finished without producing any text)"
SWEEP_INTERVAL_SECONDS = 3600.0


class BridgeService:
    def __init__(self, transport: BridgeTransport, settings: Settings) -> None:
        self._transport = transport
        self.settings = settings
        self.jobs = JobStore(settings.data_dir)
        self._stop = threading.Event()

    def start(self) -> None:
        """Tidy up in the background: close logs a previous process left open, then sweep old
        logs now and hourly. Nothing here delays the first request."""
        # Listed now, before any request is accepted: only these can be a previous run's leftovers.
        leftovers = self.jobs.existing()
        threading.Thread(
            target=self._housekeeping, args=(leftovers,), name="iris-bridge-sweeper", daemon=True
        ).start()

    def stop(self) -> None:
        self._stop.set()

    def _housekeeping(self, leftovers: list[Path]) -> None:
        if leftovers:
            interrupted = self.jobs.interrupt_unfinished(leftovers)
            if interrupted:
                log.warning("marked %d unfinished bridge request(s) as interrupted", interrupted)
        while True:
            try:
                self._sweep()
            except OSError:
                log.exception("bridge retention sweep failed")
            if self._stop.wait(SWEEP_INTERVAL_SECONDS):
                return

    def _sweep(self) -> None:
        max_age = self.settings.bridge_job_retention_seconds
        removed = self.jobs.sweep(max_age)
        # Requests without a conversation key each had a one-off session; they go too.
        cutoff = time.time() - max_age
        for folder in self.settings.data_dir.glob(f"{SESSION_PREFIX}{ONE_OFF_PREFIX}*"):
            log_file = folder / LOG_NAME
            if folder.is_dir() and (not log_file.exists() or log_file.stat().st_mtime < cutoff):
                shutil.rmtree(folder, ignore_errors=True)
                removed += 1
        if removed:
            log.info("retention sweep removed %d bridge job log(s) and one-off sessions", removed)

    def handle(self, request: BridgeRequest) -> Job:
        """Accept a request: its job exists (and is logged) before this returns."""
        request_id = request.request_id or f"req-{uuid.uuid4().hex}"
        job = self.jobs.create(request_id)
        session = conversation_session(request.conversation_key, request_id)
        event = TransportEvent(
            channel=session_channel(session), text=request.text, user=request.origin or "bridge"
        )
        log.info("bridge request %s → session %s", request_id, session)

        def report(text: str) -> None:
            job.append("status", text=clip_status(text))

        try:
            ticket = self._transport.submit_request(event, report)
        except IrisError as exc:
            job.append("error", error=exc.message, code=exc.code, requestId=request_id)
            self.jobs.finished(job)
            return job
        except Exception:  # a bug: the log still ends, so no caller waits on it forever
            job.append("error", error="internal error", code="internal_error", requestId=request_id)
            self.jobs.finished(job)
            raise
        ticket.add_done_callback(lambda result: self._finish(job, result))
        return job

    def _finish(self, job: Job, result: RunResult) -> None:
        try:
            self._append_outcome(job, result)
        finally:
            self.jobs.finished(job)  # the log's descriptor is released whatever happened

    def _append_outcome(self, job: Job, result: RunResult) -> None:
        if result.status == "cancelled" or result.error_code == "shutting_down":
            job.append(
                "error",
                error=f"the agent shut down before finishing: {result.error or 'cancelled'}",
                code="shutting_down",
                requestId=job.request_id,
                text=result.text,
            )
        else:
            # A [SILENT] run is not a run that forgot to answer: it is marked, not salvaged with
            # NO_REPLY. The mark is only ever added, so an older parent just sees empty text.
            silent = result.silent and not result.text
            job.append(
                "final",
                text=result.text or ("" if silent else NO_REPLY),
                requestId=job.request_id,
                status=result.status,
                usage=usage_to_json(result.usage),
                **({"silent": True} if silent else {}),
            )

"""Iris as an ACP client: runs a manifest's ``bin`` as an ACP agent for a chat's turns.

The rules are spec 004's ("How the program is run", "The conversation", "Models", "Images"):

- one agent process alive at a time, the one for the chat that ran last, reused for that chat's
  next turns; SIGKILL (no warning) when another chat (or agent, or model) takes a turn, after a
  turn is stopped or fails, and on an agent restart. Turns therefore run one at a time;
- ``initialize`` with protocol version 1 and honest capabilities (Iris offers no file system or
  terminal to the agent);
- the chat keeps the agent's session id (:mod:`.acp_session` opens or restores it);
- a ``refusal`` stop reason, the process dying, the connection breaking, a start or a prompt that
  hangs: each ends the turn as a failure with a message that says which.

The SDK runs on :class:`LoopThread`; :meth:`AcpHost.ask` is called on an engine thread and waits.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, TypeVar, cast

from acp import PROTOCOL_VERSION, Client, RequestError, connect_to_agent, image_block, text_block
from acp.schema import (
    AgentCapabilities,
    ClientCapabilities,
    FileSystemCapabilities,
    Implementation,
    McpServerStdio,
)

from iris_runtime import __version__
from iris_runtime.custom_agents.acp_client import HostClient, add_text
from iris_runtime.custom_agents.acp_grants import ToolGrants, server_entry
from iris_runtime.custom_agents.acp_loop import LoopThread
from iris_runtime.custom_agents.acp_process import base_environment, spawn
from iris_runtime.custom_agents.acp_sandbox import unsandboxed_refusal
from iris_runtime.custom_agents.acp_session import AcpFailure, Live, SessionOpener, said
from iris_runtime.custom_agents.chats import ChatBook
from iris_runtime.custom_agents.manifest import Manifest
from iris_runtime.custom_agents.relay import images_of
from iris_runtime.custom_agents.settings import CustomAgentSettings
from iris_runtime.custom_agents.turns import OpenTurns, Turn, TurnOutput, TurnResult
from iris_runtime.engine.transport import Attachment

log = logging.getLogger("iris_runtime.custom_agents.acp")
T = TypeVar("T")

POLL_SECONDS = 0.2  # how often a waiting engine thread looks at Stop


class AcpHost:
    def __init__(
        self,
        chats: ChatBook,
        config: CustomAgentSettings,
        data_dir: Path,
        cwd: Path,
        grants: ToolGrants | None = None,
    ) -> None:
        self.chats = chats
        self.grants = grants or ToolGrants()
        self.config = config
        self.data_dir = data_dir
        self.cwd = cwd
        self.turns = OpenTurns()  # ACP turns only: the reach socket never sees them
        self._loop = LoopThread("acp-host")
        self._one_turn = threading.Lock()
        self._live: Live | None = None  # touched on the loop thread only
        self._dying: asyncio.Task[None] | None = None
        self._errors: dict[str, str] = {}
        self._sessions = SessionOpener(chats, cwd, self.grants, config.acp_start_seconds)

    # -- the engine's side ----------------------------------------------------------------------

    def ask(
        self,
        manifest: Manifest,
        chat_id: str,
        text: str,
        attachments: Sequence[Attachment],
        output: TurnOutput,
        abort: threading.Event,
        off_lane: Callable[[], AbstractContextManager[None]],
    ) -> TurnResult:
        if not self._one_turn.acquire(blocking=False):
            # One agent process at a time: say why nothing happens yet, never wait unseen.
            status = getattr(output, "status", None)
            if callable(status):
                status("waiting for another chat's turn to finish")
            with off_lane():  # waiting for another chat's turn is not compute
                while not self._one_turn.acquire(timeout=POLL_SECONDS):
                    if abort.is_set():
                        return TurnResult("", "stopped")
        try:
            turn = self.turns.open(manifest.kind, chat_id, output)
            try:
                return self._turn(manifest, turn, text, attachments, abort, off_lane)
            finally:
                self.turns.end(turn, "failed")  # a no-op unless an exception got here
                self._errors.pop(turn.turn_id, None)
        finally:
            self._one_turn.release()

    def _turn(
        self,
        manifest: Manifest,
        turn: Turn,
        text: str,
        attachments: Sequence[Attachment],
        abort: threading.Event,
        off_lane: Callable[[], AbstractContextManager[None]],
    ) -> TurnResult:
        model = self.model_of(manifest, turn.chat_id)
        key = (manifest.kind, turn.chat_id, model, manifest.bin, manifest.args)
        with off_lane():
            try:
                live, notice = self._wait(self._ensure(manifest, key, model, turn.chat_id), abort)
            except AcpFailure as exc:
                return TurnResult("", "failed", str(exc))
            except concurrent.futures.CancelledError:
                return TurnResult("", "stopped")
            if notice:
                self.turns.deliver(turn.turn_id, lambda t: add_text(t, notice + "\n\n"))
            blocks = self._blocks(manifest.kind, live.caps, text, attachments)
            live.client.turn, live.client.stopping = turn, False
            turn.touch()
            prompt = self._loop.submit(self._prompt(live, turn, blocks))
            reason = turn.wait(abort, self.config.acp_silence_seconds)
        if reason in {"stopped", "silence"} and not self.turns.end(turn, reason):
            reason = turn.ended or reason  # the prompt answered first: it finished after all
        if reason == "done":
            live.client.turn = None
            return TurnResult(turn.text(), "done")
        if reason == "stopped":
            live.client.stopping = True
            self._loop.submit(self._cancel_then_kill(live, prompt))
            return TurnResult(turn.text(), "stopped")
        if reason == "shutdown":  # stop() kills the process and ends the loop itself
            return TurnResult(turn.text(), "failed", "Iris stopped before the agent finished")
        if reason == "silence":
            error = f"it went silent: no update for {self.config.acp_silence_seconds:g} s"
            if live.process.malformed:
                error += f" (it wrote {live.process.malformed} lines that were not JSON-RPC)"
        else:
            error = self._errors.get(turn.turn_id, "the turn failed")
        self._loop.call(self._retire(live))
        return TurnResult(turn.text(), "failed", error)

    def _wait(self, coro: Awaitable[T], abort: threading.Event) -> T:
        """Run ``coro`` on the loop; cancelled when Stop is pressed."""
        future = self._loop.submit(_as_coroutine(coro))
        while True:
            try:
                return future.result(POLL_SECONDS)
            except concurrent.futures.TimeoutError:
                if abort.is_set():
                    future.cancel()  # the coroutine retires what it started (see _ensure)
                    raise concurrent.futures.CancelledError from None

    def model_of(self, manifest: Manifest, chat_id: str) -> str | None:
        """The chat's model for this agent; None on Default (or a model no longer offered)."""
        chosen = self.chats.agent_state(chat_id, manifest.kind).get("model")
        return chosen if chosen in {m.id for m in manifest.models} else None

    def restart(self, kind: str) -> None:
        """An agent restart: its process, if it is the live one, is killed."""

        self._sessions.forget_refusal(kind)

        async def kill() -> None:
            if self._live is not None and self._live.key[0] == kind:
                await self._retire(self._live)

        if self._loop_started():
            self._loop.call(kill())

    def stop(self) -> None:
        self.turns.end_all("shutdown")
        if self._loop_started():
            self._loop.call(self._retire(self._live), timeout=10)
        self._loop.stop()

    def live_pid(self) -> int | None:
        live = self._live
        return live.process.pid if live is not None and live.process.alive else None

    def _loop_started(self) -> bool:
        return self._live is not None or self._dying is not None

    # -- on the loop ----------------------------------------------------------------------------

    async def _ensure(
        self, manifest: Manifest, key: tuple[Any, ...], model: str | None, chat_id: str
    ) -> tuple[Live, str | None]:
        dying = self._dying
        if dying is not None:
            # One process at a time: the stopped one is gone first. Waited for, never awaited:
            # a Stop of this turn must not cancel it (it would never retire the process).
            await asyncio.wait({dying})
            if self._dying is dying:
                self._dying = None
        live = self._live
        if live is not None and (live.key != key or not live.process.alive):
            await self._retire(live)
        if self._live is not None:
            return self._live, None
        try:
            live = await self._start(manifest, key, model)
            notice = await self._sessions.open(manifest, live, chat_id, model)
        except BaseException:  # a failure, or Stop (cancelled): the half-started process goes
            await self._retire(self._live)
            raise
        return live, notice

    async def _start(self, manifest: Manifest, key: tuple[Any, ...], model: str | None) -> Live:
        assert manifest.bin is not None
        if (refusal := unsandboxed_refusal()) is not None:
            raise AcpFailure(refusal)
        env = base_environment()
        if model is not None and manifest.model_env:
            env[manifest.model_env] = model
        env["IRONWIRE_CHAT_ID"] = key[1]
        env["WIRELING_REACH_SOCK"] = str(self.config.reach_socket)
        try:
            process, stdin = await spawn(
                manifest.kind, [manifest.bin, *manifest.args], env, str(self.cwd)
            )
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise AcpFailure(f"{manifest.bin} could not be started: {reason}") from None
        client = HostClient(manifest.kind, self.turns)
        # HostClient answers what Iris offers; the SDK answers the rest "method not found".
        conn = connect_to_agent(cast("Client", client), stdin, process.reader)
        partial = Live(key, process, conn, client, AgentCapabilities())
        partial.token = self.grants.mint(manifest.kind, key[1])
        entry = server_entry(partial.token, manifest.kind, key[1], str(self.config.reach_socket))
        if self._sessions.takes_mcp(manifest.kind):
            partial.mcp = [McpServerStdio.model_validate(entry)]
        self._live = partial  # so that Stop during initialize kills it
        capabilities = ClientCapabilities(
            fs=FileSystemCapabilities(read_text_file=False, write_text_file=False),
            terminal=False,
        )
        answer = await self._sessions.step(
            partial,
            "initialize",
            conn.initialize(
                protocol_version=PROTOCOL_VERSION,
                client_capabilities=capabilities,
                client_info=Implementation(name="iris", title="Iris", version=__version__),
            ),
        )
        if answer.protocol_version != PROTOCOL_VERSION:
            await self._retire(partial)
            raise AcpFailure(
                f"it speaks ACP protocol version {answer.protocol_version}; "
                f"Iris speaks {PROTOCOL_VERSION}"
            )
        partial.caps = answer.agent_capabilities or AgentCapabilities()
        return partial

    async def _prompt(self, live: Live, turn: Turn, blocks: list[Any]) -> None:
        try:
            answer = await live.conn.prompt(session_id=live.session_id, prompt=blocks)
        except RequestError as exc:
            self._fail(turn, f"it answered the prompt with an error: {said(exc)}")
            return
        except (ConnectionError, OSError, EOFError):
            code = await live.process.reap(2.0)
            self._fail(turn, live.process.death(code))
            return
        except Exception as exc:  # a malformed answer the SDK could not read
            self._fail(turn, f"its answer to the prompt could not be read: {exc}")
            return
        if answer.stop_reason == "refusal":
            self._fail(turn, "the agent refused to answer (stop reason: refusal)")
        else:
            self.turns.end(turn, "done")

    def _fail(self, turn: Turn, error: str) -> None:
        if turn.ended is not None:  # already over (stopped, timed out): nobody reads the error
            return
        self._errors[turn.turn_id] = error  # before the end: the engine thread reads it then
        if not self.turns.end(turn, "failed"):
            self._errors.pop(turn.turn_id, None)  # it ended meanwhile: the same

    async def _cancel_then_kill(self, live: Live, prompt: concurrent.futures.Future[None]) -> None:
        """Stop: ``session/cancel``, a short grace for the prompt to answer, then SIGKILL."""

        async def finish() -> None:
            try:
                await asyncio.wait_for(live.conn.cancel(session_id=live.session_id), 1.0)
                await asyncio.wait_for(
                    asyncio.wrap_future(prompt), self.config.acp_cancel_grace_seconds
                )
            except Exception as exc:  # an agent that ignores cancel, or is already gone
                log.info("acp agent %s did not end its prompt on cancel: %r", live.key[0], exc)
            finally:
                await self._retire(live)

        self._dying = asyncio.get_running_loop().create_task(finish())

    async def _retire(self, live: Live | None) -> None:
        """SIGKILL ``live``'s process and close its connection."""
        if live is None:
            return
        if self._live is live:
            self._live = None
        self.grants.revoke(live.token)
        live.process.kill()
        code = await live.process.reap()
        try:
            await asyncio.wait_for(live.conn.close(), 2.0)
        except Exception:
            log.debug("closing the connection to %s failed", live.key[0], exc_info=True)
        log.info("acp agent %s [%d] ended (exit %s)", live.key[0], live.process.pid, code)

    # -- prompt blocks --------------------------------------------------------------------------

    def _blocks(
        self, kind: str, caps: AgentCapabilities, text: str, attachments: Sequence[Attachment]
    ) -> list[Any]:
        """Images ahead of the text when the agent takes them; otherwise dropped and counted."""
        images = images_of(attachments, self.data_dir)
        if attachments:
            text = f"{text}\n\nAttached: {', '.join(a.name for a in attachments)}"
        takes_images = caps.prompt_capabilities is not None and caps.prompt_capabilities.image
        if images and not takes_images:
            log.info("acp agent %s takes no images: %d ignored", kind, len(images))
            images = []
        return [*(image_block(data, mime) for mime, data in images), text_block(text)]


async def _as_coroutine(awaitable: Awaitable[T]) -> T:
    return await awaitable

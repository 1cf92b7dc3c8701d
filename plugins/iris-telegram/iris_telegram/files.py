"""Photos and documents people send: downloaded into the conversation's ``attachments/`` folder
(the chat's, or a forum topic's own when the chat has a channel mode).

Paths are built only through ``resolve_channel_path`` from names :func:`safe_file_name` already
cleaned, prefixed with the message id so two files of the same name never collide. A file that
cannot be fetched (too large, gone, network down after retries) does not lose the message: the
run gets a note saying which file is missing and why.
"""

from __future__ import annotations

import logging
from pathlib import Path

from iris_runtime.engine.channels import resolve_channel_dir, resolve_channel_path
from iris_runtime.engine.transport import Attachment
from iris_runtime.errors import IrisError
from iris_telegram.api import BotApi, TelegramError
from iris_telegram.inbound import Inbound, RemoteFile

log = logging.getLogger(__name__)


class Downloads:
    def __init__(self, api: BotApi, data_dir: Path, max_bytes: int) -> None:
        self._api = api
        self._data_dir = data_dir
        self._max_bytes = max_bytes

    def fetch(self, inbound: Inbound) -> tuple[list[Attachment], list[str]]:
        """The files saved, and a note for each one that could not be."""
        saved: list[Attachment] = []
        problems: list[str] = []
        for remote in inbound.files:
            try:
                saved.append(self._fetch_one(inbound, remote))
            except (TelegramError, IrisError, OSError) as exc:
                reason = exc.description if isinstance(exc, TelegramError) else str(exc)
                log.warning(
                    "could not download %s from %s: %s", remote.name, inbound.channel, reason
                )
                problems.append(
                    f"(the attached file {remote.name} could not be downloaded: {reason})"
                )
        return saved, problems

    def _fetch_one(self, inbound: Inbound, remote: RemoteFile) -> Attachment:
        limit_mb = self._max_bytes // (1024 * 1024)
        if remote.size is not None and remote.size > self._max_bytes:
            raise TelegramError("getFile", f"it is larger than {limit_mb} MB")
        info = self._api.call("getFile", {"file_id": remote.file_id})
        file_path = info.get("file_path") if isinstance(info, dict) else None
        if not isinstance(file_path, str) or not file_path:
            raise TelegramError("getFile", "Telegram gave no file_path (the file may be too big)")
        name = f"{inbound.message_id}_{remote.name}"
        # The conversation's folder (a topic's own, in a channel mode): where its run reads.
        base = resolve_channel_dir(self._data_dir, inbound.run_key, create=True)
        destination = resolve_channel_path(self._data_dir, inbound.run_key, "attachments", name)
        destination.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._api.download(file_path, destination, self._max_bytes)
        local = destination.relative_to(base.parent)
        return Attachment(local=str(local), name=remote.name)

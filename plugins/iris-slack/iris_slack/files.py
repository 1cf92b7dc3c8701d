"""Files shared in a Slack message, saved into its conversation's folder (the channel's, or a
thread's own in a channel mode: ``C…@<ts>``) before its run starts."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from iris_runtime.engine.channels import resolve_channel_path
from iris_runtime.engine.transport import Attachment
from iris_runtime.errors import IrisError
from iris_slack.api import SlackApi, SlackError
from iris_slack.text import safe_file_name

log = logging.getLogger(__name__)

MAX_FILES_PER_MESSAGE = 10


def save_files(
    api: SlackApi, limit: int, data_dir: Path, channel: str, ts: str, files: list[dict[str, Any]]
) -> tuple[list[Attachment], list[str]]:
    """Download shared files into ``<channel>/attachments/`` (``channel``: the conversation
    key), each at most ``limit`` bytes; the problems as prompt lines."""
    saved: list[Attachment] = []
    problems: list[str] = []
    for index, info in enumerate(files):
        name = safe_file_name(str(info.get("name") or info.get("title") or ""), f"file{index}")
        if index >= MAX_FILES_PER_MESSAGE:
            problems.append(f"(file {name} was not saved: at most {MAX_FILES_PER_MESSAGE})")
            continue
        try:
            saved.append(_save_file(api, limit, data_dir, channel, ts, index, name, info))
        except SlackError as exc:
            log.warning("slack: a file shared in %s was not saved: %s", channel, exc.error)
            problems.append(f"(file {name} was not saved: {exc.error})")
        except (IrisError, OSError) as exc:
            log.warning("slack: a file shared in %s was not saved: %s", channel, exc)
            problems.append(f"(file {name} was not saved)")
    return saved, problems


def _save_file(
    api: SlackApi,
    limit: int,
    data_dir: Path,
    channel: str,
    ts: str,
    index: int,
    name: str,
    info: dict[str, Any],
) -> Attachment:
    url = info.get("url_private_download") or info.get("url_private")
    if not isinstance(url, str) or info.get("mode") in {"tombstone", "external"}:
        raise SlackError("files.download", "not_downloadable")
    size = info.get("size")
    if isinstance(size, int) and size > limit:
        raise SlackError("files.download", "file_too_large")
    stamp = safe_file_name(ts, "0")
    path = resolve_channel_path(data_dir, channel, "attachments", f"{stamp}_{index}_{name}")
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    api.download(url, limit, tmp)  # streamed, at most ``limit`` bytes, mode 0600
    os.replace(tmp, path)
    return Attachment(local=str(path.relative_to(data_dir)), name=name)

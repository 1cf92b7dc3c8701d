"""``iris --env-file PATH``: settings from a ``KEY=VALUE`` file, as systemd's EnvironmentFile=.

The file is read with the same parser as the ``env`` secrets mode
(:func:`~iris_runtime.secrets.env_store.parse_env_file`), but strictly: a line that is not
``KEY=VALUE`` is an error naming its line number, where that parser skips it. A value read from
the file wins over the inherited environment, as it does for a unit with ``EnvironmentFile=``,
so a command run by hand (``sudo iris --env-file /iris/.env agents list``) sees exactly the
configuration the service runs with.

Values are secrets as often as not: no message ever shows one, nor a line of the file.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from iris_runtime.secrets.env_store import env_file_lines, parse_env_file

OPTION = "--env-file"
KEY_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class EnvFileError(Exception):
    """The file cannot be used; the message names the file (and line), never a value."""


def read_env_file(path: Path) -> dict[str, str]:
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise EnvFileError(f"{OPTION} {path}: no such file") from None
    except IsADirectoryError:
        raise EnvFileError(f"{OPTION} {path}: is a directory, not a file") from None
    except OSError as exc:
        raise EnvFileError(f"{OPTION} {path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise EnvFileError(f"{OPTION} {path}: not UTF-8 text (byte {exc.start})") from None
    for number, key, has_value, value in env_file_lines(text):
        if not has_value or not KEY_RE.fullmatch(key.strip()):
            raise EnvFileError(
                f"{OPTION} {path}: line {number} is not KEY=VALUE "
                "(KEY: letters, digits and '_', not starting with a digit)"
            )
        if "\0" in value:
            raise EnvFileError(f"{OPTION} {path}: line {number} holds a NUL byte")
    return parse_env_file(text)


def load_env_file(path: Path) -> None:
    """Read ``path`` and put its values into this process's environment (file wins)."""
    os.environ.update(read_env_file(path))


def env_file_in_argv(argv: Sequence[str]) -> Path | None:
    """The ``--env-file`` given before the subcommand in ``argv`` (without the program name).

    Read ahead of click because plugin commands are discovered, from the configuration, before
    click parses anything. Only ``iris``'s own options come before the subcommand; the first
    argument that is not one ends the search. An ``--env-file`` without a value is left for
    click to report."""
    args = list(argv)
    found: Path | None = None
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == OPTION:
            if index + 1 >= len(args):
                return found
            found = Path(args[index + 1])
            index += 2
            continue
        if arg.startswith(OPTION + "="):
            found = Path(arg[len(OPTION) + 1 :])
        elif arg == "--" or not arg.startswith("-"):
            break
        index += 1
    return found

"""The server side of RFC 6455, as much as Socket Mode uses: the opening handshake, text frames
out, masked frames in (text, ping, pong, close, fragments), standard library only."""

from __future__ import annotations

import base64
import hashlib
import struct
from typing import Protocol

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

OP_CONTINUATION = 0x0
OP_TEXT = 0x1
OP_BINARY = 0x2
OP_CLOSE = 0x8
OP_PING = 0x9
OP_PONG = 0xA

MAX_FRAME_BYTES = 16 * 1024 * 1024


class Reader(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


class ProtocolError(Exception):
    """The peer broke the framing rules; the connection must be closed."""


def accept_key(client_key: str) -> str:
    """The ``Sec-WebSocket-Accept`` answer to a client's ``Sec-WebSocket-Key``."""
    digest = hashlib.sha1((client_key.strip() + GUID).encode("ascii")).digest()  # noqa: S324
    return base64.b64encode(digest).decode("ascii")


def encode_frame(opcode: int, payload: bytes) -> bytes:
    """One final, unmasked frame (servers never mask)."""
    head = bytearray([0x80 | opcode])
    size = len(payload)
    if size < 126:
        head.append(size)
    elif size < 1 << 16:
        head.append(126)
        head += struct.pack("!H", size)
    else:
        head.append(127)
        head += struct.pack("!Q", size)
    return bytes(head) + payload


def _read_exactly(stream: Reader, size: int) -> bytes:
    data = stream.read(size)
    if data is None or len(data) < size:
        raise EOFError("connection closed mid-frame")
    return data


def read_frame(stream: Reader) -> tuple[bool, int, bytes]:
    """``(fin, opcode, payload)`` of the next frame from a client; raises EOFError at the end."""
    first = stream.read(2)
    if not first:
        raise EOFError("connection closed")
    if len(first) < 2:
        raise EOFError("connection closed mid-frame")
    fin = bool(first[0] & 0x80)
    opcode = first[0] & 0x0F
    masked = bool(first[1] & 0x80)
    size = first[1] & 0x7F
    if size == 126:
        (size,) = struct.unpack("!H", _read_exactly(stream, 2))
    elif size == 127:
        (size,) = struct.unpack("!Q", _read_exactly(stream, 8))
    if size > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame of {size} bytes is too large")
    if not masked:
        raise ProtocolError("client frames must be masked")
    mask = _read_exactly(stream, 4)
    masked_payload = _read_exactly(stream, size)
    keystream = (mask * (size // 4 + 1))[:size]
    payload = (int.from_bytes(masked_payload, "big") ^ int.from_bytes(keystream, "big")).to_bytes(
        size, "big"
    )
    return fin, opcode, payload


def close_payload(code: int, reason: str = "") -> bytes:
    return struct.pack("!H", code) + reason.encode("utf-8")

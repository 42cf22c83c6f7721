"""The one exception type protocol code raises for bad input from the wire.

`reason` is a short snake_case code that the runtime uses as a rejection-counter key,
so dashboards can say *why* messages were dropped without parsing prose. The message
is one human-readable line.

Reasons raised by this package (others may add their own, e.g. "wrong_swarm"):
  malformed      not msgpack, truncated, trailing bytes, invalid UTF-8, duplicate map key
  oversized      a message, string, bytes or tuple longer than its cap (see protocol.limits)
  bad_version    envelope or message version is not PROTOCOL_VERSION
  unknown_kind   the "k" field names no known message kind
  bad_type       a value of the wrong type (bool is not int, bytes is not str, ext types)
  extra_key      a map has a key the schema does not know
  missing_key    a map lacks a key the schema requires
  non_finite     NaN or infinity where a float is expected
  out_of_range   an int or float outside its documented bounds, or a string too short
  inconsistent   fields that disagree with each other (e.g. found=False with a payload)
  bad_signature  the envelope signature does not verify
  impersonation  the message's peer_id is not the envelope's signer
  wrong_swarm    the message belongs to another swarm (raised by callers that check it)
"""

from __future__ import annotations

MAX_MESSAGE_CHARS = 200
"""Messages quote hostile input (repr of a bad key, a peer id); cap them so a log line stays a line."""


class ProtocolError(Exception):
    """Bad input from a peer. `reason` is a counter key; str(error) is one line for humans."""

    def __init__(self, reason: str, message: str = "") -> None:
        text = " ".join((message or reason.replace("_", " ")).split())
        if len(text) > MAX_MESSAGE_CHARS:
            text = text[: MAX_MESSAGE_CHARS - 3] + "..."
        self.reason = reason
        self.message = text
        super().__init__(f"{reason}: {text}")

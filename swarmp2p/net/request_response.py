"""Direct request/response over libp2p streams: one request frame out, one answer frame back.

- /swarmp2p/fetch/1.0.0   one request frame -> one response frame (status byte + body); the node's
                          request handler answers (rollout batch fetches).
- /swarmp2p/hello/1.0.0   empty request -> the node's current signed Hello bytes; how a joining
                          peer learns the swarm schedule from its bootstrap peer before round 1.

Peer exchange (peer_exchange.py) rides on the same `roundtrip` and `serve_small`. All payloads
are opaque bytes: sizes, timeouts and garbage are handled here, meaning is the node's."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import trio
from libp2p.abc import IHost
from libp2p.custom_types import TProtocol
from libp2p.peer.id import ID
from libp2p.protocol_muxer.exceptions import MultiselectClientError, ProtocolNotSupportedError

from swarmp2p.net.counters import DropCounters
from swarmp2p.net.frames import FrameError, FrameTooLarge, encode_frame
from swarmp2p.net.lazy_select import open_lazily
from swarmp2p.net.peer_addrs import parse_peer_id
from swarmp2p.net.settings import NetworkSettings
from swarmp2p.net.streams import read_frame, write_frame
from swarmp2p.net.tcp_stall import is_stalled
from swarmp2p.ports import NetworkError, ProtocolRefused, RequestHandler

logger = logging.getLogger(__name__)

FETCH_PROTOCOL = TProtocol("/swarmp2p/fetch/1.0.0")
HELLO_PROTOCOL = TProtocol("/swarmp2p/hello/1.0.0")

_STATUS_OK = 0
_STATUS_ERROR = 1
MAX_HELLO_BYTES = 64 * 1024
# Ahead of an answer on a request's stream: multistream-select's two echoes and the frame's
# length prefix (~60 bytes for our protocol ids); the receive window granted covers them too.
_NEGOTIATION_SLACK_BYTES = 1024


class RequestResponse:
    """The fetch and hello protocols of one host, and the round trip they (and peer exchange)
    use. Connecting is the adapter's: `ensure_connected(pid)` dials a peer that has no open
    connection (raising NetworkError if it cannot), `drop_stale(pid)` forgets closed
    connections py-libp2p still lists (returning how many)."""

    def __init__(
        self,
        host: IHost,
        settings: NetworkSettings,
        counters: DropCounters,
        *,
        ensure_connected: Callable[[ID], Awaitable[None]],
        drop_stale: Callable[[ID], int],
    ) -> None:
        self.host = host
        self.settings = settings
        self.counters = counters
        self._ensure_connected = ensure_connected
        self._drop_stale = drop_stale
        self._request_handler: RequestHandler | None = None
        self._hello: bytes = b""
        host.set_stream_handler(FETCH_PROTOCOL, self._serve_fetch)
        host.set_stream_handler(HELLO_PROTOCOL, self._serve_hello)

    def set_request_handler(self, handler: RequestHandler) -> None:
        self._request_handler = handler

    def set_hello(self, data: bytes) -> None:
        """The bytes served on /swarmp2p/hello/1.0.0 (the node's current signed Hello)."""
        if len(data) > MAX_HELLO_BYTES:
            raise ValueError(f"hello of {len(data)} bytes exceeds {MAX_HELLO_BYTES}")
        self._hello = data

    async def request(self, peer_id: str, data: bytes, timeout_s: float) -> bytes:
        if len(data) > self.settings.max_request_bytes:
            raise NetworkError(f"request of {len(data)} bytes exceeds {self.settings.max_request_bytes}")
        body = await self.roundtrip(
            peer_id, FETCH_PROTOCOL, data, self.settings.max_response_bytes + 1, timeout_s
        )
        if not body:
            self.counters.add("response_garbage")
            raise NetworkError(f"empty response from {peer_id}")
        status, payload = body[0], body[1:]
        if status == _STATUS_OK:
            return payload
        if status == _STATUS_ERROR:
            raise NetworkError(f"{peer_id} refused the request: {payload[:200].decode('utf-8', 'replace')}")
        self.counters.add("response_garbage")
        raise NetworkError(f"bad response status {status} from {peer_id}")

    async def request_hello(self, peer_id: str, timeout_s: float = 5.0) -> bytes:
        """The Hello bytes `peer_id` currently serves (b"" when it has none yet)."""
        return await self.roundtrip(peer_id, HELLO_PROTOCOL, b"", MAX_HELLO_BYTES, timeout_s)

    async def roundtrip(
        self, peer_id: str, protocol: TProtocol, data: bytes, max_response: int, timeout_s: float
    ) -> bytes:
        """Send `data` as one frame on a new `protocol` stream to `peer_id` and read one answer
        frame of at most `max_response` bytes. Raises ProtocolRefused when the peer does not
        serve `protocol`, NetworkError for anything else that goes wrong."""
        pid = parse_peer_id(peer_id)
        if pid is None:
            raise NetworkError(f"not a peer id: {peer_id!r}")
        with trio.move_on_after(timeout_s) as scope:
            stream = None
            try:
                await self._ensure_connected(pid)
                # The request goes out with the protocol negotiation, not after it (lazy_select.py).
                request = encode_frame(data)
                network = self.host.get_network()
                # Credit for the whole answer up front (yamux_credit.grant_receive_window): the
                # multistream echoes and the length prefix come before it.
                window = max_response + _NEGOTIATION_SLACK_BYTES
                try:
                    stream = await open_lazily(network, pid, protocol, request, receive_window=window)
                except ProtocolNotSupportedError:
                    raise
                except Exception:
                    # The connection closed under us: drop it, re-dial once, try again.
                    if not self._drop_stale(pid):
                        raise
                    self.counters.add("stream_retried")
                    await self._ensure_connected(pid)
                    stream = await open_lazily(network, pid, protocol, request, receive_window=window)
                return await read_frame(stream, max_response)
            except FrameTooLarge as error:
                self.counters.add("response_oversized")
                raise NetworkError(f"response from {peer_id} too large: {error}") from error
            except NetworkError:
                raise
            except (FrameError, Exception) as error:
                if _protocol_not_supported(error):
                    raise ProtocolRefused(f"{peer_id} does not serve {protocol}") from error
                raise NetworkError(
                    f"{protocol} to {peer_id} failed: {type(error).__name__}: {error}"
                ) from error
            finally:
                if stream is not None:
                    with trio.CancelScope(shield=True), trio.move_on_after(1.0):
                        await quiet_close(stream)
        assert scope.cancelled_caught
        await self._close_stalled_connections(pid)
        raise NetworkError(f"{protocol} to {peer_id} timed out after {timeout_s:.1f}s")

    async def _close_stalled_connections(self, pid: ID) -> None:
        """After a request to `pid` timed out: close its connections stalled in TCP
        retransmission backoff (tcp_stall.py), so that the next request dials a fresh one."""
        for conn in [c for c in self.host.get_network().connections.get(pid, []) if is_stalled(c)]:
            with trio.CancelScope(shield=True), trio.move_on_after(1.0):
                await conn.close()
            self.counters.add("stale_connections_dropped")

    async def _serve_fetch(self, stream: Any) -> None:
        remote = remote_peer(stream)
        try:
            with trio.fail_after(self.settings.handler_timeout_s):
                request = await read_frame(stream, self.settings.max_request_bytes)
                handler = self._request_handler
                if handler is None:
                    await write_frame(stream, bytes([_STATUS_ERROR]) + b"no request handler")
                    return
                try:
                    response = await handler(remote, request)
                except Exception as error:
                    # The node validates requests; anything it raises is that peer's bad request.
                    self.counters.add("request_handler_error")
                    logger.debug("request handler failed for %s: %r", remote, error)
                    await write_frame(stream, bytes([_STATUS_ERROR]) + b"bad request")
                    return
                if len(response) > self.settings.max_response_bytes:
                    self.counters.add("response_oversized")
                    await write_frame(stream, bytes([_STATUS_ERROR]) + b"response too large")
                    return
                await write_frame(stream, bytes([_STATUS_OK]) + response)
        except FrameTooLarge:
            self.counters.add("request_oversized")
            await quiet_reset(stream)
        except FrameError:
            self.counters.add("request_garbage")
            await quiet_reset(stream)
        except trio.TooSlowError:
            self.counters.add("request_timeout")
            await quiet_reset(stream)
        except Exception as error:  # transport errors while writing: the requester went away
            logger.debug("fetch stream from %s failed: %r", remote, error)
            await quiet_reset(stream)
        else:
            await quiet_close(stream)

    async def serve_small(
        self, stream: Any, respond: Callable[[bytes], bytes | None], max_request: int = 0
    ) -> None:
        """One request frame of at most `max_request` bytes (0: it must be empty; anything
        else is garbage) -> `respond(request)`, or a reset where that is None (a request it
        refused and counted)."""
        try:
            with trio.fail_after(self.settings.handler_timeout_s):
                response = respond(await read_frame(stream, max_request))
                if response is None:
                    await quiet_reset(stream)
                    return
                await write_frame(stream, response)
        except FrameTooLarge:
            self.counters.add("request_oversized" if max_request else "request_garbage")
            await quiet_reset(stream)
        except FrameError:
            self.counters.add("request_garbage")
            await quiet_reset(stream)
        except trio.TooSlowError:
            self.counters.add("request_timeout")
            await quiet_reset(stream)
        except Exception:
            await quiet_reset(stream)
        else:
            await quiet_close(stream)

    async def _serve_hello(self, stream: Any) -> None:
        await self.serve_small(stream, lambda _request: self._hello)


def _protocol_not_supported(error: BaseException) -> bool:
    """Whether multistream negotiation failed because the remote refused the protocol.
    py-libp2p 0.8.1 raises StreamFailure from a MultiselectClientError whose only mark of
    the cause is its text ("protocols not supported: ..."); it drops the typed
    ProtocolNotSupportedError it caught."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, ProtocolNotSupportedError) or (
            isinstance(current, MultiselectClientError) and "protocols not supported" in str(current)
        ):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def remote_peer(stream: Any) -> str:
    """The base58 id of the peer at the other end of `stream` ("?" when it cannot be told)."""
    try:
        return stream.muxed_conn.peer_id.to_base58()
    except Exception:
        return "?"


async def quiet_close(stream: Any) -> None:
    try:
        await stream.close()
    except Exception:
        pass


async def quiet_reset(stream: Any) -> None:
    try:
        await stream.reset()
    except Exception:
        pass

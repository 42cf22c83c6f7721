"""The embedded chain (eth-tester / py-evm) served as JSON-RPC over HTTP on 127.0.0.1: what
`swarmp2p chain devnet --backend embedded` runs when anvil is not installed.

Only what a swarm needs is served (the methods below: web3's HTTP client, `ContractClient` and
`swarmp2p chain ...` use no others); anything else is a JSON-RPC "method not found". One
request at a time (py-evm is not thread-safe); every transaction is mined at once, like anvil's
automine, in a block stamped with the time it is mined at (`stamp_pending_block`; eth-tester
alone stamps a block with the time its PREDECESSOR was mined). eth-tester's answers
(snake_case keys, Python ints) are turned into JSON-RPC's wire format (camelCase keys, hex
quantities); a revert is JSON-RPC error 3 "execution reverted: <reason>", as geth and anvil
answer.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger(__name__)


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(part.capitalize() for part in rest)


def to_wire(value: Any) -> Any:
    """eth-tester's Python answer -> JSON-RPC's wire format."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return hex(value)
    if isinstance(value, (bytes, bytearray)):
        return "0x" + bytes(value).hex()
    if isinstance(value, dict):
        return {_camel(k): to_wire(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_wire(v) for v in value]
    return value


def _int(value: Any) -> int:
    return int(value, 16) if isinstance(value, str) else int(value)


def _block_id(value: Any) -> Any:
    if value in (None, "latest", "pending", "earliest", "safe", "finalized"):
        return value or "latest"
    return _int(value)


def _call_params(call: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in call.items():
        if key in ("gas", "value", "gasPrice", "maxFeePerGas", "maxPriorityFeePerGas", "nonce"):
            out[{"gasPrice": "gas_price", "maxFeePerGas": "max_fee_per_gas",
                 "maxPriorityFeePerGas": "max_priority_fee_per_gas"}.get(key, key)] = _int(value)  # fmt: skip
        elif key in ("from", "to", "data"):
            out[key] = value
        elif key == "input":
            out["data"] = value
    out.setdefault("gas", 10_000_000)
    return out


def stamp_pending_block(tester: Any, now_s: float) -> int:
    """Stamp the block eth-tester is about to mine with `now_s` (whole seconds, and at least one
    past its parent's, as block timestamps must increase); returns the stamp.

    eth-tester opens the next block when it mines one, with that moment's time, so a block mined
    later carries the time its predecessor was mined at. A contract reading `block.timestamp`
    then sees the past: the coordinator's `stageStartedAt` was the previous transaction's time,
    so a node reading `stageStartedAt + stageDuration` found each new stage (nearly) over when it
    began and skipped every round after its first. Anvil stamps blocks with the time it mines them.
    """
    chain = tester.backend.chain
    header = chain.header
    stamp = max(int(now_s), chain.get_canonical_head().timestamp + 1)
    if header.timestamp != stamp:
        chain.header = header.copy(timestamp=stamp)
    return stamp


class RpcError(Exception):
    def __init__(self, code: int, message: str, data: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


class EmbeddedRpc:
    """JSON-RPC methods over one EthereumTester (the one of an EmbeddedChain)."""

    def __init__(self, tester: Any, chain_id: int, *, now_s: Callable[[], float] = time.time) -> None:
        self.tester = tester
        self.chain_id = chain_id
        self.now_s = now_s  # wall time, for the timestamps of mined blocks
        self.lock = threading.Lock()

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        from eth_tester.exceptions import TransactionFailed, TransactionNotFound

        answer: dict[str, Any] = {"jsonrpc": "2.0", "id": request.get("id")}
        method = request.get("method")
        params = request.get("params") or []
        handler = getattr(self, f"_{method}", None)
        try:
            if handler is None or not isinstance(method, str):
                raise RpcError(-32601, f"method not found: {method}")
            with self.lock:
                answer["result"] = handler(*params)
        except RpcError as error:
            answer["error"] = {"code": error.code, "message": error.message}
            if error.data is not None:
                answer["error"]["data"] = error.data
        except TransactionNotFound:
            answer["result"] = None
        except TransactionFailed as error:
            raw = error.args[0] if error.args else ""
            if isinstance(raw, bytes):
                answer["error"] = {"code": 3, "message": "execution reverted", "data": "0x" + raw.hex()}
            else:
                answer["error"] = {"code": 3, "message": f"execution reverted: {raw}"}
        except Exception as error:  # the chain said no: an RPC error, never a dead server
            message = " ".join(str(error).split()) or type(error).__name__
            if "insufficient" in message.lower() or "balance" in message.lower():
                message = f"insufficient funds for gas * price + value: {message}"
            answer["error"] = {"code": -32000, "message": message[:500]}
        return answer

    # ---- methods (named _<rpc method>) ----

    def _web3_clientVersion(self) -> str:
        return "swarmp2p-embedded/eth-tester"

    def _net_version(self) -> str:
        return str(self.chain_id)

    def _eth_chainId(self) -> str:
        return hex(self.chain_id)

    def _eth_blockNumber(self) -> str:
        return hex(self.tester.get_block_by_number("latest")["number"])

    def _eth_getBlockByNumber(self, block: Any, full: bool = False) -> Any:
        found = self.tester.get_block_by_number(_block_id(block), full)
        return to_wire(found)

    def _eth_getBlockByHash(self, block_hash: str, full: bool = False) -> Any:
        return to_wire(self.tester.get_block_by_hash(block_hash, full))

    def _eth_gasPrice(self) -> str:
        base = self.tester.get_block_by_number("latest").get("base_fee_per_gas") or 0
        return hex(base + 10**9)

    def _eth_maxPriorityFeePerGas(self) -> str:
        return hex(10**9)

    def _eth_getTransactionCount(self, address: str, block: Any = "latest") -> str:
        return hex(self.tester.get_nonce(address, _block_id(block)))

    def _eth_getBalance(self, address: str, block: Any = "latest") -> str:
        return hex(self.tester.get_balance(address, _block_id(block)))

    def _eth_getCode(self, address: str, block: Any = "latest") -> str:
        return to_wire(self.tester.get_code(address, _block_id(block)))

    def _eth_accounts(self) -> list[str]:
        return list(self.tester.get_accounts())

    def _eth_sendRawTransaction(self, raw: str) -> str:
        stamp_pending_block(self.tester, self.now_s())  # mined at once: at this time
        return self.tester.send_raw_transaction(raw)

    def _eth_getTransactionReceipt(self, tx_hash: str) -> Any:
        receipt = dict(self.tester.get_transaction_receipt(tx_hash))
        receipt.pop("state_root", None)
        receipt.setdefault("logs_bloom", 0)
        return to_wire(receipt)

    def _eth_getTransactionByHash(self, tx_hash: str) -> Any:
        tx = dict(self.tester.get_transaction_by_hash(tx_hash))
        tx["input"] = tx.pop("data", "0x")
        return to_wire(tx)

    def _params(self, call: dict[str, Any]) -> dict[str, Any]:
        params = _call_params(call)
        # A call without a sender (web3's default) runs as the first, richly funded account:
        # eth-tester checks that the sender could pay for the gas even of a view call.
        params.setdefault("from", self.tester.get_accounts()[0])
        return params

    def _eth_call(self, call: dict[str, Any], block: Any = "latest", *_overrides: Any) -> Any:
        params = self._params(call)
        try:
            return to_wire(self.tester.call(params, _block_id(block)))
        except Exception as error:
            if "cannot afford" not in str(error):
                raise
            # An unfunded sender (a read-only client's throwaway account): geth and anvil run
            # calls at gas price 0; eth-tester cannot, so run it as the funded first account.
            params["from"] = self.tester.get_accounts()[0]
            return to_wire(self.tester.call(params, _block_id(block)))

    def _eth_estimateGas(self, call: dict[str, Any], block: Any = "latest") -> str:
        return hex(self.tester.estimate_gas(self._params(call), _block_id(block)))

    def _eth_feeHistory(self, count: Any, newest: Any, percentiles: list[float] | None = None) -> Any:
        raise RpcError(-32601, "method not found: eth_feeHistory")


class EmbeddedRpcServer:
    """`EmbeddedRpc` on http://127.0.0.1:PORT (0: a free port) in a daemon thread."""

    def __init__(self, rpc: EmbeddedRpc, port: int = 0, host: str = "127.0.0.1") -> None:
        handler = _handler_for(rpc)
        self.httpd = ThreadingHTTPServer((host, port), handler)
        self.port = self.httpd.server_address[1]
        self.url = f"http://{host}:{self.port}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def start(self) -> EmbeddedRpcServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _handler_for(rpc: EmbeddedRpc) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            try:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length))
            except (ValueError, OSError):
                return self._send(
                    400, {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "parse error"}}
                )
            if isinstance(body, list):
                return self._send(200, [rpc.handle(item) for item in body])
            return self._send(200, rpc.handle(body))

        def _send(self, status: int, payload: Any) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("rpc: " + format, *args)

    return Handler

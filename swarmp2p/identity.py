"""A node's ed25519 libp2p identity, kept in a private key file.

File format: the libp2p protobuf `PrivateKey` message (KeyType.Ed25519, data = the 32-byte
seed), exactly what py-libp2p 0.8.1's `libp2p.identity_utils.save_identity` writes, so that
files are interchangeable with `load_identity` there. Files written by go-libp2p (data = the
64-byte seed || public key) load too: the public half is checked against the seed.

Permissions: the file is created with mode 0600 by `os.open(O_CREAT | O_EXCL, 0o600)` on a
temporary name in the same directory and then linked (or, with `force`, renamed) into place,
so it is never readable by others, not even for an instant, and a crash never leaves a
half-written key behind. Loading REFUSES a file that group or others can read or write
(like ssh does): a leaked key lets anyone impersonate the peer and poison its reputation.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:  # libp2p is imported lazily: loading it costs about a second
    from libp2p.crypto.keys import KeyPair

SEED_BYTES = 32
_MAX_KEY_FILE_BYTES = 4096  # a key file is ~36 bytes; anything far larger is not one


class IdentityError(Exception):
    """An identity file is missing, unsafe or corrupt. `str()` is one line."""


@attrs.frozen
class Identity:
    """A peer's identity: its libp2p peer id (base58 text), ed25519 seed and key pair."""

    peer_id: str
    seed: bytes = attrs.field(repr=False)  # never print a secret
    key_pair: KeyPair = attrs.field(repr=False, eq=False)

    @classmethod
    def from_seed(cls, seed: bytes) -> Identity:
        from libp2p.crypto.ed25519 import create_new_key_pair
        from libp2p.peer.id import ID

        if len(seed) != SEED_BYTES:
            raise IdentityError(f"identity seed must be {SEED_BYTES} bytes, got {len(seed)}")
        try:
            key_pair = create_new_key_pair(seed)
        except ValueError as error:
            raise IdentityError(f"identity seed is unusable: {error}") from None
        return cls(peer_id=str(ID.from_pubkey(key_pair.public_key)), seed=bytes(seed), key_pair=key_pair)

    def private_key_bytes(self) -> bytes:
        """The libp2p protobuf serialization of the private key (the file's content)."""
        return self.key_pair.private_key.serialize()


def generate_identity() -> Identity:
    """A fresh random identity (not saved)."""
    # libp2p refuses the rare seed whose public key is not a valid curve point; retry.
    for _ in range(100):
        try:
            return Identity.from_seed(secrets.token_bytes(SEED_BYTES))
        except IdentityError:
            continue
    raise IdentityError("could not generate a valid ed25519 key in 100 attempts")


def create_identity(path: Path | str, *, force: bool = False) -> Identity:
    """Generate an identity and write it to `path` (mode 0600, parent dirs created).

    Refuses to replace an existing file unless `force`.
    """
    path = Path(path).expanduser()
    if path.exists() and not force:
        raise IdentityError(f"identity file {path} already exists (use --force to replace it)")
    identity = generate_identity()
    try:
        _write_private(path, identity.private_key_bytes(), replace=force)
    except OSError as error:
        raise IdentityError(f"cannot write identity file {path}: {error.strerror or error}") from None
    return identity


def load_identity(path: Path | str) -> Identity:
    """Read the identity at `path`. Raises IdentityError (missing, unsafe mode, corrupt)."""
    path = Path(path).expanduser()
    try:
        with open(path, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise IdentityError(f"identity file {path} is not a regular file")
            if os.name == "posix" and info.st_mode & 0o077:
                raise IdentityError(
                    f"identity file {path} has mode {stat.S_IMODE(info.st_mode):04o}: others can access "
                    f"it; refusing to use it (run: chmod 600 {path})"
                )
            data = handle.read(_MAX_KEY_FILE_BYTES + 1)
    except FileNotFoundError:
        raise IdentityError(
            f"identity file {path} does not exist (create one with: swarmp2p keygen --out {path})"
        ) from None
    except IsADirectoryError:
        raise IdentityError(f"identity file {path} is a directory") from None
    except PermissionError:
        raise IdentityError(f"identity file {path} is not readable by this user") from None
    except OSError as error:
        raise IdentityError(f"cannot read identity file {path}: {error.strerror}") from None
    if len(data) > _MAX_KEY_FILE_BYTES:
        raise IdentityError(f"identity file {path} is too large to be a private key")
    return _parse_private_key(data, path)


def load_or_create_identity(path: Path | str) -> Identity:
    """Load the identity at `path`, creating it first if the file does not exist."""
    path = Path(path).expanduser()
    if not path.exists():
        try:
            return create_identity(path)
        except IdentityError:
            if not path.exists():
                raise
            # Another process created it between our check and our link: use theirs.
    return load_identity(path)


def _parse_private_key(data: bytes, path: Path) -> Identity:
    from libp2p.crypto.keys import KeyType, PrivateKey

    try:
        message = PrivateKey.deserialize_from_protobuf(data)
    except Exception:
        raise IdentityError(f"identity file {path} is corrupt: not a libp2p private key") from None
    if message.key_type != KeyType.Ed25519.value:
        raise IdentityError(
            f"identity file {path} holds a key of type {message.key_type}, not ed25519 (type 1)"
        )
    key_data = bytes(message.data)
    if len(key_data) == 2 * SEED_BYTES:  # go-libp2p layout: seed || public key
        seed, public = key_data[:SEED_BYTES], key_data[SEED_BYTES:]
    elif len(key_data) == SEED_BYTES:  # py-libp2p layout: the seed alone
        seed, public = key_data, None
    else:
        raise IdentityError(
            f"identity file {path} is corrupt: ed25519 key of {len(key_data)} bytes (expected 32 or 64)"
        )
    identity = Identity.from_seed(seed)
    if public is not None and identity.key_pair.public_key.to_bytes() != public:
        raise IdentityError(f"identity file {path} is corrupt: public key does not match the private key")
    return identity


def _write_private(path: Path, data: bytes, *, replace: bool) -> None:
    """Write `data` to `path` atomically with mode 0600; never readable by others meanwhile."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0) | getattr(os, "O_NOFOLLOW", 0)
    descriptor = os.open(temporary, flags, 0o600)
    try:
        try:
            if os.name == "posix":
                os.fchmod(descriptor, 0o600)  # a umask cannot widen it, but be explicit
            view = memoryview(data)
            while view:
                view = view[os.write(descriptor, view) :]
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
        if replace:
            os.replace(temporary, path)
        else:
            try:
                # link() fails if `path` exists: no race can make us overwrite a key.
                os.link(temporary, path)
            except FileExistsError:
                raise IdentityError(
                    f"identity file {path} already exists (use --force to replace it)"
                ) from None
            except OSError:
                # File systems without hard links: fall back to an exclusive rename check.
                if path.exists():
                    raise IdentityError(
                        f"identity file {path} already exists (use --force to replace it)"
                    ) from None
                os.replace(temporary, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
    _fsync_directory(path.parent)


def _fsync_directory(directory: Path) -> None:
    # Make the new directory entry durable; not possible (nor needed) on every platform.
    with contextlib.suppress(OSError):
        descriptor = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)

"""swarmp2p.identity: ed25519 identity files, mode 0600, libp2p-compatible, clear errors."""

from __future__ import annotations

import os
import stat

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from libp2p import identity_utils
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.crypto.pb import crypto_pb2
from libp2p.peer.id import ID

from swarmp2p.identity import (
    Identity,
    IdentityError,
    create_identity,
    load_identity,
    load_or_create_identity,
)


def mode_of(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def assert_one_line(error: IdentityError, *words: str) -> None:
    message = str(error)
    assert "\n" not in message
    for word in words:
        assert word in message, f"{word!r} missing from {message!r}"


def test_create_then_load_round_trips_with_mode_0600(tmp_path):
    path = tmp_path / "node.key"
    created = create_identity(path)
    assert mode_of(path) == 0o600
    loaded = load_identity(path)
    assert loaded == created
    assert len(loaded.seed) == 32
    assert loaded.peer_id == str(ID.from_pubkey(loaded.key_pair.public_key))
    assert loaded.peer_id.startswith("12D3KooW")  # an inlined ed25519 peer id


def test_file_stays_0600_whatever_the_umask(tmp_path):
    previous = os.umask(0)
    try:
        create_identity(tmp_path / "open-umask.key")
    finally:
        os.umask(previous)
    assert mode_of(tmp_path / "open-umask.key") == 0o600


def test_key_signs_and_the_peer_id_key_verifies(tmp_path):
    identity = create_identity(tmp_path / "node.key")
    signature = identity.key_pair.private_key.sign(b"round 7")
    public = ID.from_base58(identity.peer_id).extract_public_key()
    assert public.verify(b"round 7", signature)
    assert not public.verify(b"round 8", signature)


def test_files_are_interchangeable_with_py_libp2p(tmp_path):
    ours = create_identity(tmp_path / "ours.key")
    theirs = identity_utils.load_identity(tmp_path / "ours.key")
    assert str(ID.from_pubkey(theirs.public_key)) == ours.peer_id

    key_pair = create_new_key_pair()
    identity_utils.save_identity(key_pair, tmp_path / "theirs.key")
    assert load_identity(tmp_path / "theirs.key").peer_id == str(ID.from_pubkey(key_pair.public_key))


def test_go_libp2p_layout_seed_plus_public_key_loads(tmp_path):
    key_pair = create_new_key_pair()
    seed, public = key_pair.private_key.to_bytes(), key_pair.public_key.to_bytes()
    path = tmp_path / "go.key"
    write_private(path, crypto_pb2.PrivateKey(key_type=1, data=seed + public).SerializeToString())
    assert load_identity(path).peer_id == str(ID.from_pubkey(key_pair.public_key))

    other_public = create_new_key_pair().public_key.to_bytes()
    write_private(path, crypto_pb2.PrivateKey(key_type=1, data=seed + other_public).SerializeToString())
    with pytest.raises(IdentityError) as caught:
        load_identity(path)
    assert_one_line(caught.value, "public key does not match")


def test_refuses_to_overwrite_without_force(tmp_path):
    path = tmp_path / "node.key"
    first = create_identity(path)
    with pytest.raises(IdentityError) as caught:
        create_identity(path)
    assert_one_line(caught.value, "already exists", "--force")
    assert load_identity(path) == first

    replaced = create_identity(path, force=True)
    assert replaced.peer_id != first.peer_id
    assert load_identity(path) == replaced and mode_of(path) == 0o600


def test_creates_parent_directories_and_leaves_no_temporary_files(tmp_path):
    path = tmp_path / "a" / "b" / "node.key"
    create_identity(path)
    create_identity(path, force=True)
    assert sorted(p.name for p in path.parent.iterdir()) == ["node.key"]


def test_load_or_create_creates_once_then_reuses(tmp_path):
    path = tmp_path / "node.key"
    first = load_or_create_identity(path)
    assert load_or_create_identity(path) == first


def test_missing_file_is_a_one_line_error_with_the_fix(tmp_path):
    with pytest.raises(IdentityError) as caught:
        load_identity(tmp_path / "missing.key")
    assert_one_line(caught.value, "missing.key", "does not exist", "swarmp2p keygen")


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660, 0o620])
def test_refuses_a_key_that_others_can_access(tmp_path, mode):
    path = tmp_path / "node.key"
    create_identity(path)
    path.chmod(mode)
    with pytest.raises(IdentityError) as caught:
        load_identity(path)
    assert_one_line(caught.value, f"{mode:04o}", "chmod 600")


def test_directory_is_not_an_identity(tmp_path):
    with pytest.raises(IdentityError):
        load_identity(tmp_path)


def test_other_key_types_are_refused(tmp_path):
    path = tmp_path / "rsa.key"
    write_private(path, crypto_pb2.PrivateKey(key_type=0, data=b"\x01" * 64).SerializeToString())
    with pytest.raises(IdentityError) as caught:
        load_identity(path)
    assert_one_line(caught.value, "not ed25519")


def test_wrong_seed_length_is_corrupt(tmp_path):
    path = tmp_path / "short.key"
    write_private(path, crypto_pb2.PrivateKey(key_type=1, data=b"\x01" * 31).SerializeToString())
    with pytest.raises(IdentityError) as caught:
        load_identity(path)
    assert_one_line(caught.value, "corrupt", "31 bytes")


def test_oversized_file_is_refused(tmp_path):
    path = tmp_path / "huge.key"
    write_private(path, b"\x00" * 100_000)
    with pytest.raises(IdentityError) as caught:
        load_identity(path)
    assert_one_line(caught.value, "too large")


@settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(content=st.binary(max_size=200))
def test_arbitrary_bytes_never_crash_the_loader(tmp_path, content):
    path = tmp_path / "fuzz.key"
    write_private(path, content)
    try:
        identity = load_identity(path)
    except IdentityError as error:
        assert "\n" not in str(error)
    else:  # only a genuine ed25519 key can load, and then its peer id is consistent
        assert identity.peer_id == str(ID.from_pubkey(identity.key_pair.public_key))


def test_repr_never_shows_the_seed(tmp_path):
    identity = create_identity(tmp_path / "node.key")
    assert identity.seed.hex() not in repr(identity)
    assert identity.peer_id in repr(identity)


def test_from_seed_is_deterministic_and_checks_length():
    seed = bytes(range(32))
    assert Identity.from_seed(seed).peer_id == Identity.from_seed(seed).peer_id
    with pytest.raises(IdentityError):
        Identity.from_seed(b"short")


def write_private(path, data: bytes) -> None:
    path.write_bytes(data)
    path.chmod(0o600)

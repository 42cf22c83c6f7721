# pragma version 0.4.3
# pragma evm-version cancun
# pragma optimize gas
"""
@title SwarmCoordinator
@notice The on-chain round clock and scoreboard of a swarmp2p swarm.
@dev Rounds are divided into `stageCount` stages; only the stage manager advances them.
     Peers (libp2p base58 peer ids, at most 128 characters) are claimed by the first
     address that registers them; one address may own several. Each owned peer reports
     one reward per (round, stage) and one winners vote per round.

     Rewards are fixed-point integers: REWARD_SCALE (10**6) means 1.0, so a reward
     in [0, 1] is stored as an integer in [0, 10**6].

     Two top-K leaderboards (by total reward, by total wins) are maintained on every
     submission, so that readers never have to scan event history. Their entries are
     sorted by score, highest first; an entry moves up only past a strictly lower
     score, so among equal scores the earlier arrival stays ahead. A board is four
     storage words (32 packed peer ordinals), so its storage cost per update does not
     grow with it: it is read once and written once per transaction, and sorted in memory.
"""

REWARD_SCALE: public(constant(uint256)) = 10**6
MAX_PEER_ID_LENGTH: constant(uint256) = 128
MAX_WINNERS: public(constant(uint256)) = 32
MAX_BOOTNODES: public(constant(uint256)) = 64
MAX_BOOTNODES_PER_CALL: constant(uint256) = 16
LEADERBOARD_SIZE: public(constant(uint256)) = 32
MAX_STAGE_COUNT: constant(uint256) = 16
# A peer's ordinal is its registration index + 1 (0: not registered). A board stores
# ordinals of ORDINAL_BITS bits, PER_WORD to a word, 0 marking the free places.
ORDINAL_BITS: constant(uint256) = 32
ORDINAL_MASK: constant(uint256) = 2**32 - 1
PER_WORD: constant(uint256) = 8
BOARD_WORDS: constant(uint256) = 4  # LEADERBOARD_SIZE / PER_WORD
ADDRESS_MASK: constant(uint256) = 2**160 - 1
REWARD_BOARD: constant(uint256) = 0
WINS_BOARD: constant(uint256) = 1


struct Standing:
    peerId: String[128]
    score: uint256


event OwnershipTransferred:
    previousOwner: indexed(address)
    newOwner: indexed(address)

event StageManagerChanged:
    previousManager: indexed(address)
    newManager: indexed(address)

event BootnodeManagerChanged:
    previousManager: indexed(address)
    newManager: indexed(address)

event StageDurationChanged:
    stageDuration: uint256

event StageAdvanced:
    round: indexed(uint256)
    stage: uint256
    startedAt: uint256

event PeerRegistered:
    owner: indexed(address)
    peerId: String[128]

event RewardSubmitted:
    sender: indexed(address)
    round: indexed(uint256)
    stage: uint256
    reward: uint256
    peerId: String[128]

event WinnersSubmitted:
    sender: indexed(address)
    round: indexed(uint256)
    winnerCount: uint256
    peerId: String[128]

event BootnodesAdded:
    manager: indexed(address)
    count: uint256

event BootnodeRemoved:
    manager: indexed(address)
    index: uint256

event BootnodesCleared:
    manager: indexed(address)


owner: public(address)
stageManager: public(address)
bootnodeManager: public(address)

stageCount: public(uint256)
# Seconds a stage is expected to last: a hint published by the operator so that
# peers can tell when the current stage ends. The chain does not enforce it.
stageDuration: public(uint256)
currentRound: public(uint256)
currentStage: public(uint256)
stageStartedAt: public(uint256)

# Peers are keyed by keccak256(peerId) so that String keys are hashed once per call.
# _peer[key] = ordinal << 160 | owner address: the ownership check that every submission
# makes already reads the ordinal, which keys the totals and fills the boards.
_peer: HashMap[bytes32, uint256]
_peer_id: HashMap[bytes32, String[128]]
_peer_at: HashMap[uint256, bytes32]
peerCount: public(uint256)
ownedPeerCount: public(HashMap[address, uint256])

_reward_submitted: HashMap[uint256, HashMap[uint256, HashMap[bytes32, bool]]]
_stage_reward: HashMap[uint256, HashMap[uint256, HashMap[bytes32, uint256]]]
_round_reward: HashMap[uint256, HashMap[bytes32, uint256]]
submissionCount: public(HashMap[uint256, HashMap[uint256, uint256]])

_voted: HashMap[uint256, HashMap[bytes32, bool]]
_round_votes: HashMap[uint256, HashMap[bytes32, uint256]]
_votes_cast: HashMap[bytes32, uint256]
# keccak256(abi_encode(keccak256(winner) for each winner, in order)): lets a voter check that
# a vote found on-chain is the one it meant to cast (idempotent retries).
_vote_digest: HashMap[uint256, HashMap[bytes32, bytes32]]
voterCount: public(HashMap[uint256, uint256])

# Totals and leaderboards per board, REWARD_BOARD (total reward) or WINS_BOARD (total wins).
_total: HashMap[uint256, HashMap[uint256, uint256]]  # board -> ordinal -> total
_board: HashMap[uint256, uint256[BOARD_WORDS]]  # board -> packed ordinals, highest first

_bootnodes: DynArray[String[256], MAX_BOOTNODES]


@deploy
def __init__(stage_count: uint256, stage_duration: uint256):
    assert stage_count > 0 and stage_count <= MAX_STAGE_COUNT, "invalid stage count"
    self.owner = msg.sender
    self.stageManager = msg.sender
    self.bootnodeManager = msg.sender
    self.stageCount = stage_count
    self.stageDuration = stage_duration
    self.stageStartedAt = block.timestamp
    log OwnershipTransferred(previousOwner=empty(address), newOwner=msg.sender)
    log StageManagerChanged(previousManager=empty(address), newManager=msg.sender)
    log BootnodeManagerChanged(previousManager=empty(address), newManager=msg.sender)
    log StageAdvanced(round=0, stage=0, startedAt=block.timestamp)


# ---------------------------------------------------------------- roles

@external
def transferOwnership(new_owner: address):
    assert msg.sender == self.owner, "only owner"
    assert new_owner != empty(address), "zero address"
    log OwnershipTransferred(previousOwner=self.owner, newOwner=new_owner)
    self.owner = new_owner


@external
def setStageManager(manager: address):
    assert msg.sender == self.owner, "only owner"
    assert manager != empty(address), "zero address"
    log StageManagerChanged(previousManager=self.stageManager, newManager=manager)
    self.stageManager = manager


@external
def setBootnodeManager(manager: address):
    assert msg.sender == self.owner, "only owner"
    assert manager != empty(address), "zero address"
    log BootnodeManagerChanged(previousManager=self.bootnodeManager, newManager=manager)
    self.bootnodeManager = manager


@external
def setStageDuration(stage_duration: uint256):
    assert msg.sender == self.owner, "only owner"
    self.stageDuration = stage_duration
    log StageDurationChanged(stageDuration=stage_duration)


# ---------------------------------------------------------------- round clock

@external
def updateStageAndRound() -> (uint256, uint256):
    """
    @notice Advance one stage; after the last stage of a round, start the next round.
    @return The new (round, stage).
    """
    assert msg.sender == self.stageManager, "only stage manager"
    stage: uint256 = self.currentStage + 1
    round: uint256 = self.currentRound
    if stage >= self.stageCount:
        stage = 0
        round += 1
    self.currentStage = stage
    self.currentRound = round
    self.stageStartedAt = block.timestamp
    log StageAdvanced(round=round, stage=stage, startedAt=block.timestamp)
    return (round, stage)


@view
@external
def roundInfo() -> (uint256, uint256, uint256, uint256, uint256):
    """
    @notice (currentRound, currentStage, stageCount, stageStartedAt, stageDuration) in one call.
    """
    return (self.currentRound, self.currentStage, self.stageCount, self.stageStartedAt, self.stageDuration)


# ---------------------------------------------------------------- peers

@external
def registerPeer(peer_id: String[128]):
    """
    @notice Claim `peer_id` for the sender. The first claimant owns it for good.
    """
    assert len(peer_id) > 0, "empty peer id"
    key: bytes32 = keccak256(peer_id)
    current: address = self._owner(self._peer[key])
    assert current != msg.sender, "peer id already registered"
    assert current == empty(address), "peer id owned by another address"
    ordinal: uint256 = self.peerCount + 1
    assert ordinal <= ORDINAL_MASK, "too many peers"  # ~4.3e9: a board entry holds 32 bits
    self._peer[key] = (ordinal << 160) | convert(msg.sender, uint256)
    self._peer_id[key] = peer_id
    self._peer_at[ordinal - 1] = key
    self.peerCount = ordinal
    self.ownedPeerCount[msg.sender] += 1
    log PeerRegistered(owner=msg.sender, peerId=peer_id)


@view
@external
def peerOwner(peer_id: String[128]) -> address:
    return self._owner(self._peer[keccak256(peer_id)])


@view
@external
def areRegistered(peer_ids: DynArray[String[128], MAX_WINNERS]) -> DynArray[bool, MAX_WINNERS]:
    """@notice For each peer id, whether it is registered (one call instead of one per peer)."""
    result: DynArray[bool, MAX_WINNERS] = []
    for peer_id: String[128] in peer_ids:
        result.append(self._peer[keccak256(peer_id)] != 0)
    return result


@view
@external
def peerAt(index: uint256) -> String[128]:
    """
    @notice Registered peer ids in registration order, for readers that want every peer.
    """
    assert index < self.peerCount, "index out of range"
    return self._peer_id[self._peer_at[index]]


@pure
@internal
def _owner(peer: uint256) -> address:
    return convert(convert(peer & ADDRESS_MASK, uint160), address)


@view
@internal
def _require_owned(key: bytes32) -> uint256:
    """@return The peer's ordinal."""
    peer: uint256 = self._peer[key]
    assert peer != 0, "peer id not registered"
    assert self._owner(peer) == msg.sender, "sender does not own peer id"
    return peer >> 160


@internal
def _require_not_future(round: uint256):
    assert round <= self.currentRound, "round in the future"


# ---------------------------------------------------------------- rewards

@external
def submitReward(round: uint256, stage: uint256, reward: uint256, peer_id: String[128]):
    """
    @notice Report `peer_id`'s reward (fixed point, REWARD_SCALE = 1.0) for one stage.
    """
    self._require_not_future(round)
    assert stage < self.stageCount, "invalid stage"
    assert round < self.currentRound or stage <= self.currentStage, "stage in the future"
    assert reward <= REWARD_SCALE, "reward out of range"
    key: bytes32 = keccak256(peer_id)
    ordinal: uint256 = self._require_owned(key)
    assert not self._reward_submitted[round][stage][key], "reward already submitted"
    self._reward_submitted[round][stage][key] = True
    self._stage_reward[round][stage][key] = reward
    self._round_reward[round][key] += reward
    self.submissionCount[round][stage] += 1
    score: uint256 = self._total[REWARD_BOARD][ordinal] + reward
    self._total[REWARD_BOARD][ordinal] = score
    board: DynArray[uint256, LEADERBOARD_SIZE] = []
    changed: bool = False
    board, changed = self._promote(REWARD_BOARD, self._load_board(REWARD_BOARD), ordinal, score)
    if changed:
        self._store_board(REWARD_BOARD, board)
    log RewardSubmitted(sender=msg.sender, round=round, stage=stage, reward=reward, peerId=peer_id)


@view
@external
def hasSubmittedReward(round: uint256, stage: uint256, peer_id: String[128]) -> bool:
    return self._reward_submitted[round][stage][keccak256(peer_id)]


@view
@external
def stageReward(round: uint256, stage: uint256, peer_id: String[128]) -> uint256:
    return self._stage_reward[round][stage][keccak256(peer_id)]


@view
@external
def roundReward(round: uint256, peer_id: String[128]) -> uint256:
    return self._round_reward[round][keccak256(peer_id)]


@view
@external
def totalReward(peer_id: String[128]) -> uint256:
    return self._total[REWARD_BOARD][self._peer[keccak256(peer_id)] >> 160]


# ---------------------------------------------------------------- winners

@external
def submitWinners(round: uint256, winners: DynArray[String[128], MAX_WINNERS], peer_id: String[128]):
    """
    @notice `peer_id`'s vote for the best peers of `round`. Winners must be registered.
    """
    self._require_not_future(round)
    assert len(winners) > 0, "no winners"
    key: bytes32 = keccak256(peer_id)
    self._require_owned(key)
    assert not self._voted[round][key], "winners already submitted"
    keys: DynArray[bytes32, MAX_WINNERS] = []
    ordinals: DynArray[uint256, MAX_WINNERS] = []
    for winner: String[128] in winners:
        winner_key: bytes32 = keccak256(winner)
        assert winner_key not in keys, "duplicate winner"
        winner_peer: uint256 = self._peer[winner_key]
        assert winner_peer != 0, "winner not registered"
        keys.append(winner_key)
        ordinals.append(winner_peer >> 160)
    self._voted[round][key] = True
    self._vote_digest[round][key] = keccak256(abi_encode(keys))
    self._votes_cast[key] += 1
    self.voterCount[round] += 1
    for winner_key: bytes32 in keys:
        self._round_votes[round][winner_key] += 1
    # The board is read and written once for the whole vote, and sorted in memory.
    board: DynArray[uint256, LEADERBOARD_SIZE] = self._load_board(WINS_BOARD)
    changed: bool = False
    for ordinal: uint256 in ordinals:
        score: uint256 = self._total[WINS_BOARD][ordinal] + 1
        self._total[WINS_BOARD][ordinal] = score
        moved: bool = False
        board, moved = self._promote(WINS_BOARD, board, ordinal, score)
        changed = changed or moved
    if changed:
        self._store_board(WINS_BOARD, board)
    log WinnersSubmitted(sender=msg.sender, round=round, winnerCount=len(winners), peerId=peer_id)


@view
@external
def hasSubmittedWinners(round: uint256, peer_id: String[128]) -> bool:
    return self._voted[round][keccak256(peer_id)]


@view
@external
def voteDigest(round: uint256, peer_id: String[128]) -> bytes32:
    return self._vote_digest[round][keccak256(peer_id)]


@view
@external
def roundVotes(round: uint256, peer_id: String[128]) -> uint256:
    """@notice How many voters named `peer_id` a winner of `round`."""
    return self._round_votes[round][keccak256(peer_id)]


@view
@external
def totalWins(peer_id: String[128]) -> uint256:
    return self._total[WINS_BOARD][self._peer[keccak256(peer_id)] >> 160]


@view
@external
def votesCast(peer_id: String[128]) -> uint256:
    """@notice How many rounds `peer_id` has voted in."""
    return self._votes_cast[keccak256(peer_id)]


# ---------------------------------------------------------------- leaderboards

@view
@internal
def _load_board(kind: uint256) -> DynArray[uint256, LEADERBOARD_SIZE]:
    """@notice The board's ordinals in order (a free place ends it)."""
    words: uint256[BOARD_WORDS] = self._board[kind]
    board: DynArray[uint256, LEADERBOARD_SIZE] = []
    for index: uint256 in range(LEADERBOARD_SIZE):
        ordinal: uint256 = (words[index // PER_WORD] >> (index % PER_WORD * ORDINAL_BITS)) & ORDINAL_MASK
        if ordinal == 0:
            break
        board.append(ordinal)
    return board


@internal
def _store_board(kind: uint256, board: DynArray[uint256, LEADERBOARD_SIZE]):
    words: uint256[BOARD_WORDS] = empty(uint256[BOARD_WORDS])
    for index: uint256 in range(len(board), bound=LEADERBOARD_SIZE):
        words[index // PER_WORD] |= board[index] << (index % PER_WORD * ORDINAL_BITS)
    self._board[kind] = words


@view
@internal
def _promote(
    kind: uint256, board: DynArray[uint256, LEADERBOARD_SIZE], ordinal: uint256, score: uint256
) -> (DynArray[uint256, LEADERBOARD_SIZE], bool):
    """
    @notice Move `ordinal`, whose total just rose to `score`, to its place on `board`.
    @return The board (arguments are copies) and whether it changed.
    """
    # Scores only ever grow, so every peer outside a full board scores at most the
    # board's last entry: a peer whose score rose either is on the board already, or
    # takes the last place if it now strictly beats it. Then it bubbles up past strictly
    # lower scores. Finding the peer is a scan of at most 32 words of memory: cheaper than
    # keeping a stored place per peer, which costs a storage write for every entry moved.
    size: uint256 = len(board)
    position: uint256 = size
    for index: uint256 in range(size, bound=LEADERBOARD_SIZE):
        if board[index] == ordinal:
            position = index
            break
    changed: bool = False
    if position == size:
        if size < LEADERBOARD_SIZE:
            board.append(ordinal)
        elif score > self._total[kind][board[size - 1]]:
            position -= 1
            board[position] = ordinal
        else:
            return board, False
        changed = True
    for _: uint256 in range(LEADERBOARD_SIZE):
        if position == 0:
            break
        above: uint256 = board[position - 1]
        if self._total[kind][above] >= score:
            break
        board[position - 1] = ordinal
        board[position] = above
        position -= 1
        changed = True
    return board, changed


@view
@internal
def _standings(kind: uint256) -> DynArray[Standing, LEADERBOARD_SIZE]:
    result: DynArray[Standing, LEADERBOARD_SIZE] = []
    board: DynArray[uint256, LEADERBOARD_SIZE] = self._load_board(kind)
    for ordinal: uint256 in board:
        peer_id: String[128] = self._peer_id[self._peer_at[ordinal - 1]]
        result.append(Standing(peerId=peer_id, score=self._total[kind][ordinal]))
    return result


@view
@external
def rewardLeaderboard() -> DynArray[Standing, LEADERBOARD_SIZE]:
    """@notice The top peers by total reward (fixed point), highest first."""
    return self._standings(REWARD_BOARD)


@view
@external
def winnerLeaderboard() -> DynArray[Standing, LEADERBOARD_SIZE]:
    """@notice The top peers by total wins, highest first."""
    return self._standings(WINS_BOARD)


# ---------------------------------------------------------------- bootnodes

@external
def addBootnodes(addresses: DynArray[String[256], MAX_BOOTNODES_PER_CALL]):
    assert msg.sender == self.bootnodeManager, "only bootnode manager"
    assert len(addresses) > 0, "no bootnodes"
    assert len(self._bootnodes) + len(addresses) <= MAX_BOOTNODES, "too many bootnodes"
    for address_: String[256] in addresses:
        assert len(address_) > 0, "empty bootnode"
        self._bootnodes.append(address_)
    log BootnodesAdded(manager=msg.sender, count=len(addresses))


@external
def removeBootnode(index: uint256):
    """@notice Remove one bootnode; the last one takes its place (order is not kept)."""
    assert msg.sender == self.bootnodeManager, "only bootnode manager"
    count: uint256 = len(self._bootnodes)
    assert index < count, "index out of range"
    if index != count - 1:
        self._bootnodes[index] = self._bootnodes[count - 1]
    self._bootnodes.pop()
    log BootnodeRemoved(manager=msg.sender, index=index)


@external
def clearBootnodes():
    assert msg.sender == self.bootnodeManager, "only bootnode manager"
    self._bootnodes = []
    log BootnodesCleared(manager=msg.sender)


@view
@external
def getBootnodes() -> DynArray[String[256], MAX_BOOTNODES]:
    return self._bootnodes


@view
@external
def getBootnodesCount() -> uint256:
    return len(self._bootnodes)

"""The network emulator that the tests and the benches share: hosts in Linux network namespaces
joined by a userspace switch that delays, drops and reorders (netns_harness), a peer that stalls
its TCP reads (netns_stall_peer), the wire attacker kit (attack_kit), and the driver of a
`swarmp2p chain devnet` (devnet). The namespaces need root, iproute2 and /dev/net/tun;
`netns_harness.missing_requirements()` says what is missing."""

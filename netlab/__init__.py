"""The network emulator that the tests and the benches share: hosts in Linux network namespaces
joined by a userspace switch that delays, drops and reorders (netns_harness), a peer that stalls
its TCP reads (netns_stall_peer), and the wire attacker kit (attack_kit). Needs root, iproute2 and
/dev/net/tun; `netns_harness.missing_requirements()` says what is missing."""

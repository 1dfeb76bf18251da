"""Attack tooling: a hostile peer, the attack catalogue, network attacks, the fuzzer, the false-reject survey."""

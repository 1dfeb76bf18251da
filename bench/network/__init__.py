"""Costs of the real transport: gossip at many peers, bundles, a local swarm's overhead and latency."""

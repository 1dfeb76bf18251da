"""The wire protocol (schema, codec, DHT keys). Imports nothing from node/ and no torch.

Filled in by the swarm issue; the package exists now so that the layout is in place.
"""
PROTOCOL_VERSION = 1

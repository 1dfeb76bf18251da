"""The wire protocol (schema, codec, DHT keys). Imports nothing from node/ and no torch."""
PROTOCOL_VERSION = 3  # 2: groups bundles in the columnar, compressed layout of protocol/bundle2.py; 3: the fine
#                       announcement shards (FINE_SHARDS) beside the coarse ones
MAX_RECORD_TTL = 600.0  # seconds: no record under the swarm's keys may expire later than this from now
CLOCK_SKEW = 60.0  # seconds of clock disagreement tolerated on top (FIELD-NOTES: peers agree within 3 s)
ANNOUNCE_SHARDS = 64  # DHT keys the announcements are spread over (a peer's shard: a hash of its subkey)
FINE_SHARDS = 1024  # a second, finer spread of the same announcements (each peer writes one record in each), so
#                     that a read of one shard stays small at any swarm size (N / 1024 announcements); a fine
#                     shard lies within one coarse shard (FINE_SHARDS is a multiple of ANNOUNCE_SHARDS). Shard
#                     ids: 0..63 the coarse shards, ANNOUNCE_SHARDS + j the fine shard j
MAX_ANNOUNCEMENT = 2048  # bytes of one announcement record
MAX_SHARD_ANNOUNCEMENTS = 512  # announcements a DHT node holds under one shard key (a reply for the key stays
#                                under ~1.5 MB, far from hivemind's 4 MiB; 64 x 512 = 32768 peers)

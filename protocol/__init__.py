"""The wire protocol (schema, codec, DHT keys). Imports nothing from node/ and no torch."""
PROTOCOL_VERSION = 5  # 2: groups bundles in the columnar, compressed layout of protocol/bundle2.py; 3: fine
#                       announcement shards beside the coarse ones; 4: levels of them (SHARD_LEVELS); 5: a group's
#                       item is drawn from its generator's identity and second (codec.drawn_index, `created` that
#                       second), and a node's libp2p key signs its records (a subkey proves its peer id)
MAX_RECORD_TTL = 600.0  # seconds: no record under the swarm's keys may expire later than this from now
CLOCK_SKEW = 60.0  # seconds of clock disagreement tolerated on top (peers measured here agreed within 3 s)
ANNOUNCE_SHARDS = 64  # DHT keys the announcements are spread over (a peer's shard: a hash of its subkey)
SHARD_LEVELS = (ANNOUNCE_SHARDS, 256, 1024, 4096)  # the same announcements spread over ever more shards, level by
#                     level (4 times as many each), so that some level holds a few announcements a shard at any
#                     swarm size (N / 4096 at the finest); a shard lies within one shard of each level above it (an
#                     identity's shard at level l is one hash mod SHARD_LEVELS[l]). Shard ids: the levels' shards
#                     one after the other (0..63 level 0, 64..319 level 1, 320..1343 level 2, 1344..5439 level 3)
MAX_ANNOUNCEMENT = 2048  # bytes of one announcement record
MAX_SHARD_ANNOUNCEMENTS = 512  # announcements a DHT node holds under one shard key (a reply for the key stays
#                                under ~1.5 MB, far from hivemind's 4 MiB; 64 x 512 = 32768 peers)

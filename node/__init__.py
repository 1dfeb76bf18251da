"""The swarm node: a peer that trains its own model with F-TIS on its own and (later) received groups."""
__version__ = "0.1.0"

"""The machine a node runs on: torch threads and library chatter (runtime.py); ports, identity locks, child
processes and a stop that always ends (process.py)."""

"""The transfer policies, one module each (the registry finds every policy class defined here: registry.py)."""

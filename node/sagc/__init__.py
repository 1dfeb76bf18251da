"""Group-size control: the SAGC controller, a small pure state machine (controller.py), and the group policy
that feeds it length summaries, its own and other peers', each step (policy.py)."""

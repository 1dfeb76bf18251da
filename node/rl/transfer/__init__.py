"""What a received group teaches us: the one room for transfer.

- base.py: what a policy is (it decides, for a received group, whether it is used, its advantages, and its rows'
  per-token weights from our and the generator's log-probs; own groups go through the same policy);
- policies/: the named policies, one module each (`swarm policies` lists them with what each does);
- registry.py: the policies by name, `auto`'s one resolution by task, `build_policy(cfg)`;
- guard.py: what every policy sits behind (invalid log-probs, plausibility bounds, the evidence against each
  sender reported to the sender ledger);
- plan.py: a batch's plan (the guard, then the policy), which the learner, blind to the policy, trains on;
- example.py: one built group through every policy (the table in docs/ALGORITHMS.md and its test).
Nothing here networks or runs a peer (an import-linter contract in pyproject.toml says so).
"""

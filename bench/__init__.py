"""Benchmarks and experiments, run from a checkout as modules: `python -m bench.<room>.<script>`.

Rooms:
- experiments: the results page's harness (grid: what runs; runner: running one; runs: the results store;
  stats; plots; report: the page; results: the command) and the other learning experiments;
- attacks: the hostile peer (hostile), the attack catalogue (catalogue), the network attacks, the fuzzer, the
  false-reject survey;
- network: costs of the real transport (gossip at 5-200 peers, bundles, a local swarm's overhead and latency);
- sim: simulations that run the node's own code at sizes a machine cannot host (discovery to 10,000 peers,
  SAGC offline);
- perf: speed and memory of generation, the learner, the head and vLLM.
"""

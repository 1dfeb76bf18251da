"""Speed and memory of generation, the learner, the output head and vLLM."""

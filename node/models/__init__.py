"""Models: loading any model a peer runs (loading.py: zoo name, local directory, hub name, SmolLM2 GGUF; LoRA),
the offline zoo of small models the project builds itself (zoo.py), its shared tokenizer (tokenizer.py) and
their seeded pre-training (pretrain.py)."""

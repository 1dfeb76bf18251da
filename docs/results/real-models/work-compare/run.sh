#!/bin/bash
# The real models on worked answers (arith-work-add), trained: one seed of two comparisons, each run side by side
# so that its arms share this 2-core machine's load (what one seed costs here: ~1 hour a comparison).
#   swarm  SmolLM2-135M-Instruct + Gemma 3 270M in one swarm (the node's defaults: SAGC, transfer `auto`)
#          against the same two peers alone (transfer.policy=alone), same seed: two `swarm local`s at once.
#   sagc   each model alone under SAGC against fixed G = 16, same seed: four `swarm run`s at once.
# Held-out greedy accuracy (64 prompts of each split: 1-2 digit sums in distribution, 3-digit sums out of it,
# held out by content) at steps 0, EVERY, 2 x EVERY. The arms that run the longer steps run STEPS steps; the
# others run up to 3 x STEPS and are stopped when those finish (equal wall time; at equal steps they are read
# at step STEPS). Four processes on two cores: learner passes are capped at 600 padded tokens for every arm
# (the automatic budget assumes one peer a machine).
# ALONE_STEPS=STEPS (swarm only) runs the alone arm to STEPS and waits for it instead: an alone peer is
# deterministic at a seed, so its curve is the same; only its timing (equal wall clock) changes, and a slow alone
# peer is not cut short by its fast twin's load (seed 2's Gemma made 5 steps before the swarm arm ended).
# Usage: [MODELS='smollm2-135m gemma3-270m'] [ALONE_STEPS=N] run.sh swarm|sagc OUT [SEED] [STEPS] [EVERY]
# (MODELS: sagc only).
# Run from the repo root with the README's virtualenv on PATH.
set -euo pipefail
WHAT=${1:?swarm or sagc}
OUT=${2:?output folder}
SEED=${3:-1}
STEPS=${4:-8}
EVERY=${5:-4}
ALONE_STEPS=${ALONE_STEPS:-$((3 * STEPS))}
mkdir -p "$OUT"
C=(--task arith-work-add --prompts 4 --backend vllm --eval-every "$EVERY" --set model.lora=true
   --set train.lora_lr=1e-4 --set generation.temperature=0.7 --set eval.prompts=64 --set eval.samples=0
   --set train.micro_batch_tokens=600 --set train.seed=$((1000 * SEED)) --set sagc.seed="$SEED")
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
if [ "$WHAT" = swarm ]; then
  swarm local --models smollm2-135m,gemma3-270m --peers 2 --steps "$STEPS" "${C[@]}" --out "$OUT/swarm" \
    > "$OUT/swarm.log" 2>&1 &
  S=$!
  swarm local --models smollm2-135m,gemma3-270m --peers 2 --steps "$ALONE_STEPS" "${C[@]}" \
    --set transfer.policy=alone --out "$OUT/alone" > "$OUT/alone.log" 2>&1 &
  A=$!
  PIDS+=("$S" "$A")
  wait "$S"
  if [ "$ALONE_STEPS" -gt "$STEPS" ]; then kill -TERM "$A" 2>/dev/null || true; fi
  wait "$A" || true
else
  G16=() SAGC=()
  for m in ${MODELS:-smollm2-135m gemma3-270m}; do
    swarm run --model "$m" --transfer alone --group-policy fixed --group-size 16 --steps "$STEPS" "${C[@]}" \
      --metrics "$OUT/g16-$m.jsonl" --out "$OUT/g16-$m" > "$OUT/g16-$m.log" 2>&1 &
    G16+=($!)
    swarm run --model "$m" --transfer alone --group-policy sagc --steps $((3 * STEPS)) "${C[@]}" \
      --metrics "$OUT/sagc-$m.jsonl" --out "$OUT/sagc-$m" > "$OUT/sagc-$m.log" 2>&1 &
    SAGC+=($!)
  done
  PIDS+=("${G16[@]}" "${SAGC[@]}")
  wait "${G16[@]}"
  kill -TERM "${SAGC[@]}" 2>/dev/null || true
  wait "${SAGC[@]}" || true
fi

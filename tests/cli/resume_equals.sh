#!/usr/bin/env bash
# Kill-and-resume equals the uninterrupted run: trains the MNIST CNN on a slice of
# Fashion-MNIST once straight through and once stopped by SIGTERM mid-epoch (after its first
# periodic checkpoint) and resumed, then requires the two final models to be identical bit
# for bit (the tensor bytes of the two safetensors files, whose headers differ only in the
# command line). Also checks the stop's exit status (143) and message, and that a run with
# no --checkpoint-dir stops as promptly.
set -uo pipefail
source "$(dirname "$0")/wait_checkpoint.sh"
app=$1; data=$2
work=$(mktemp -d)
trap 'kill %1 %2 2>/dev/null; rm -rf "$work"' EXIT
# (validation on 500 test images: the whole test set, 10,000, took two thirds of each run)
args=(--dataset fashion-mnist --data-dir "$data" --model cnn --train-samples 1536 --test-samples 500
      --batch-size 64 --epochs 2 --seed 11 --threads 2 --log-every 1000)

"$app" "${args[@]}" --save-model "$work/straight.safetensors" > "$work/straight.log" 2>&1 \
  || { echo "uninterrupted run failed:"; cat "$work/straight.log"; exit 1; }

"$app" "${args[@]}" --checkpoint-dir "$work/ck" --checkpoint-every 4 \
  --save-model "$work/resumed.safetensors" > "$work/first.log" 2>&1 &
pid=$!
wait_checkpoint "$work/ck"
kill -TERM $pid
wait $pid
rc=$?
if [[ $rc -ne 143 ]]; then echo "expected exit status 143 after SIGTERM, got $rc:"; cat "$work/first.log"; exit 1; fi
grep -q "stopped by signal 15 after step" "$work/first.log" || { echo "no stop message:"; cat "$work/first.log"; exit 1; }
[[ -e "$work/resumed.safetensors" ]] && { echo "the stopped run should not have finished"; exit 1; }

"$app" "${args[@]}" --checkpoint-dir "$work/ck" --checkpoint-every 4 --resume \
  --save-model "$work/resumed.safetensors" > "$work/second.log" 2>&1 \
  || { echo "resumed run failed:"; cat "$work/second.log"; exit 1; }
grep -q "resumed from step" "$work/second.log" || { echo "did not resume:"; cat "$work/second.log"; exit 1; }

# A resume of the finished run with no epochs left says so (it trained nothing in silence).
"$app" "${args[@]}" --checkpoint-dir "$work/ck" --resume > "$work/third.log" 2>&1 \
  || { echo "resume of a finished run failed:"; cat "$work/third.log"; exit 1; }
grep -q "the checkpoint is past --epochs 2: nothing is left to train" "$work/third.log" \
  || { echo "no word that nothing was left to train:"; cat "$work/third.log"; exit 1; }

"$(dirname "$0")/same_tensors.py" "$work/straight.safetensors" "$work/resumed.safetensors" 1000000 || exit 1
echo "stopped at: $(grep -o 'after step [0-9]*' "$work/first.log")"

# Without --checkpoint-dir a stop ends the run after the step in progress as well; it waited
# for the next --log-every step or the epoch's end. Stopped early in epoch 2 (steps 101-200),
# once epoch 1's metrics are written, it must end well before step 200. (Small steps on one
# thread: an epoch long enough for the signal to land early, cheap under the sanitizers.)
"$app" --dataset fashion-mnist --data-dir "$data" --model cnn --train-samples 1600 \
  --test-samples 64 --batch-size 16 --epochs 2 --seed 11 --threads 1 --log-every 1000 \
  --metrics "$work/nockpt.jsonl" > "$work/nockpt.log" 2>&1 &
pid=$!
for _ in $(seq 1 3000); do [[ -s "$work/nockpt.jsonl" ]] && break; sleep 0.1; done
[[ -s "$work/nockpt.jsonl" ]] || { echo "no metrics after 300 s:"; cat "$work/nockpt.log"; exit 1; }
kill -TERM $pid
wait $pid
rc=$?
if [[ $rc -ne 143 ]]; then echo "expected exit status 143 after SIGTERM, got $rc:"; cat "$work/nockpt.log"; exit 1; fi
step=$(grep -o 'stopped by signal 15 after step [0-9]*' "$work/nockpt.log" | grep -o '[0-9]*$')
if [[ -z $step ]] || ((step <= 100 || step >= 190)); then
  echo "expected a stop early in epoch 2 (after step 101 or soon after), got '${step}':"
  cat "$work/nockpt.log"; exit 1
fi
grep -q "no --checkpoint-dir, so nothing was saved" "$work/nockpt.log" \
  || { echo "no word that nothing was saved:"; cat "$work/nockpt.log"; exit 1; }
echo "without --checkpoint-dir stopped after step $step"

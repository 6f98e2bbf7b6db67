#!/usr/bin/env bash
# Data-parallel mnist_train through scripts/dist_launch.sh, two processes on this machine:
# trains, is stopped by SIGTERM mid-epoch (both ranks stop after the same step, rank 0 writes
# the checkpoint), resumes with two processes and, from a copy of the same checkpoint, with
# one (another machine count); both finish and learn; a resumed epoch (with batch norm) ends
# as the uninterrupted run's. A launcher killed outright leaves no
# rank running and each stops gracefully. The apps themselves check after every
# epoch that the ranks' models are bit-identical. Then ResNet-50 (batch norm statistics kept
# identical across ranks), sharded inference equal to one process's, and the command-line
# errors.
set -uo pipefail
source "$(dirname "$0")/wait_checkpoint.sh"
source "$(dirname "$0")/processes.sh"
bin=$1; data=$2; launch=$3
app=$bin/mnist_train
work=$(mktemp -d)
trap 'kill %1 2>/dev/null; rm -rf "$work"' EXIT
fail() { echo "FAIL: $1"; shift; for f in "$@"; do echo "--- $f"; cat "$f"; done; exit 1; }
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
args=(--dataset fashion-mnist --data-dir "$data" --model cnn --train-samples 2048 --test-samples 1000
      --batch-size 32 --epochs 2 --seed 5 --log-every 1000 --checkpoint-every 6)

# 1. Stopped mid-run the way a machine shutting down does it: SIGTERM to every process of the
#    session at once, so each rank gets it twice (from the system and passed on by the
#    launcher) and must still stop gracefully; every rank stops after the same step.
setsid "$launch" --nprocs 2 --master 127.0.0.1:"$(port)" -- "$app" "${args[@]}" --checkpoint-dir "$work/ck" \
  > "$work/first.log" 2>&1 &
pid=$!
wait_checkpoint "$work/ck" || fail "the run wrote no checkpoint" "$work/first.log"
python3 - "$pid" <<'PY'  # every process whose session is the launcher's
import os, signal, sys
sid = int(sys.argv[1])
for p in filter(str.isdigit, os.listdir("/proc")):
    try:
        stat = open(f"/proc/{p}/stat").read()
        if int(stat[stat.rindex(")") + 2:].split()[3]) == sid:
            os.kill(int(p), signal.SIGTERM)
    except (OSError, ValueError):
        pass
PY
wait $pid
rc=$?
[[ $rc -eq 143 ]] || fail "expected exit status 143 after SIGTERM, got $rc" "$work/first.log"
grep -q "data parallel over 2 processes" "$work/first.log" || fail "no data-parallel banner" "$work/first.log"
grep -q "batch 32 per process (64 per step)" "$work/first.log" || fail "no per-process batch" "$work/first.log"
step0=$(grep -o 'stopped by signal 15 after step [0-9]*' "$work/first.log" | grep -o '[0-9]*$')
step1=$(grep -o 'rank 1 stops with the others after step [0-9]*' "$work/first.log" | grep -o '[0-9]*$')
[[ -n $step0 && $step0 == "$step1" ]] || fail "ranks did not stop together ($step0 vs $step1)" "$work/first.log"
[[ $step0 -lt 64 ]] || fail "the run finished before the stop" "$work/first.log"
cp -r "$work/ck" "$work/ck1"

# 2. Resumed with two processes: finishes and has learnt.
"$launch" --nprocs 2 --master 127.0.0.1:"$(port)" -- "$app" "${args[@]}" --checkpoint-dir "$work/ck" --resume \
  --metrics "$work/m2.jsonl" > "$work/second.log" 2>&1 || fail "resumed run failed" "$work/second.log"
grep -q "resumed from step $step0" "$work/second.log" || fail "did not resume at step $step0" "$work/second.log"
python3 - "$work/m2.jsonl" <<'PY' || exit 1
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert [r["epoch"] for r in rows][-1] == 2, rows
assert rows[-1]["val_accuracy"] > 0.6, rows  # chance is 0.1
print(f"2 processes: val_accuracy {rows[-1]['val_accuracy']:.3f}")
PY

# 3. The same checkpoint resumed by one process: the epoch goes on from the samples done.
"$app" "${args[@]}" --checkpoint-dir "$work/ck1" --resume --threads 2 --metrics "$work/m1.jsonl" \
  > "$work/third.log" 2>&1 || fail "resume with one process failed" "$work/third.log"
# 2048 samples, 32 a rank a step: 32 steps an epoch for two ranks, 64 for one. Stopped at
# batch b of two ranks' epoch, one process continues at batch 2b (the same samples done).
b=$(( step0 % 32 ))
if (( b != 0 )); then
  grep -q "the checkpoint was written by 2 process(es) at batch size 32, this run has 1 at 32: epoch 1 continues at batch $((2 * b)) instead of $b" \
    "$work/third.log" || fail "expected epoch 1 to continue at batch $((2 * b))" "$work/third.log"
fi
python3 -c 'import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; assert r[-1]["epoch"]==2 and r[-1]["val_accuracy"]>0.6, r' \
  "$work/m1.jsonl" || fail "one-process resume did not learn" "$work/third.log"
# The cosine schedule (Adam's default lr 1e-3 to 0 over 2 epochs) follows this run's steps,
# not the count of the checkpoint's bigger ones: half-way (5e-4) at the end of epoch 1, 0 at
# the end, with either process count.
for m in "$work/m1.jsonl" "$work/m2.jsonl"; do
  python3 - "$m" "$step0" <<'PY' || fail "the schedule did not follow the resumed run's steps ($m)" "$work/third.log"
import json, sys
rows = {r["epoch"]: r for r in map(json.loads, open(sys.argv[1]))}
assert abs(rows[2]["lr"]) < 1e-9, rows
# (stopped in epoch 1, before step 32, the resumed run ends that epoch and writes its row)
if int(sys.argv[2]) < 32:
    assert abs(rows[1]["lr"] - 5e-4) < 1e-12, rows
PY
done

# 3c. Resumed mid-epoch, the epoch ends as the uninterrupted run's did: its training loss
#     counts every rank's batches before the checkpoint (their mean is saved, not rank 0's
#     sum alone), and batch norm's running statistics, averaged over the ranks when the
#     checkpoint is written, give the same validation loss.
cargs=(--data synthetic --synthetic-samples 256 --depth 8 --width 4 --batch-size 32 --epochs 1
       --seed 3 --log-every 1000 --checkpoint-every 3 --keep-last 100)
"$launch" --nprocs 2 --master 127.0.0.1:"$(port)" -- "$bin/cifar_train" "${cargs[@]}" \
  --checkpoint-dir "$work/cf" --metrics "$work/cf.jsonl" > "$work/cf.log" 2>&1 || fail "cifar_train failed" "$work/cf.log"
mkdir "$work/cr"; cp "$work/cf/ckpt-0000000003.safetensors" "$work/cr/"
"$launch" --nprocs 2 --master 127.0.0.1:"$(port)" -- "$bin/cifar_train" "${cargs[@]}" \
  --checkpoint-dir "$work/cr" --resume --metrics "$work/cr.jsonl" > "$work/cr.log" 2>&1 || fail "resumed cifar_train failed" "$work/cr.log"
python3 - "$work/cf.jsonl" "$work/cr.jsonl" <<'PY' || fail "a resumed data-parallel epoch ended otherwise" "$work/cf.log" "$work/cr.log"
import json, sys
full, res = (json.loads(open(p).read().splitlines()[-1]) for p in sys.argv[1:])
for k in ("train_loss", "val_loss"):
    assert abs(full[k] - res[k]) <= 1e-5 * abs(full[k]), (k, full[k], res[k])
print(f"resumed at step 3 of 4: train_loss {res['train_loss']:.6f}, val_loss {res['val_loss']:.6f}, as uninterrupted")
PY

# 3b. The launcher killed outright (SIGKILL: nothing passed on): its ranks get SIGTERM from the
#     kernel (parent-death signal), stop together and checkpoint; none runs on orphaned.
"$launch" --nprocs 2 --master 127.0.0.1:"$(port)" -- "$app" "${args[@]}" --checkpoint-dir "$work/ck2" \
  > "$work/killed.log" 2>&1 &
pid=$!
wait_checkpoint "$work/ck2" || fail "the run wrote no checkpoint" "$work/killed.log"
kill -KILL $pid
wait $pid 2> /dev/null
# the ranks are no children of this shell: watch /proc, up to 240 s (a generous bound for the
# sanitizers on a loaded machine; they take 1-3 s). (Not `grep -l ... /proc/*/cmdline`: a
# process of another test ending while grep reads makes its status 2 even with a match, which
# ended this wait at once with the ranks still running, and passed the check after it.)
for _ in $(seq 1 2400); do
  pids_with "$work/ck2" > /dev/null || break
  sleep 0.1
done
! pids_with "$work/ck2" > /dev/null || fail "ranks still running after the launcher died" "$work/killed.log"
grep -q "stopped by signal 15 after step" "$work/killed.log" || fail "rank 0 did not stop gracefully" "$work/killed.log"
grep -q "rank 1 stops with the others" "$work/killed.log" || fail "rank 1 did not stop with rank 0" "$work/killed.log"

# 4. ResNet-50 with batch norm: each rank's running statistics saw only its shard; they are
#    averaged at the end of the epoch, so the replicas check passes.
"$launch" --nprocs 2 --master 127.0.0.1:"$(port)" -- "$bin/resnet50_train" --device cpu --image-size 32 \
  --batch-size 2 --num-classes 4 --num-batches 2 --epochs 1 > "$work/resnet.log" 2>&1 \
  || fail "data-parallel resnet50_train failed" "$work/resnet.log"

# 5. A text app with FP16 loss scaling and gradient clipping: the averaged gradients go
#    through the scaler's unscale and the clip on every rank alike (the replicas check).
"$launch" --nprocs 2 --master 127.0.0.1:"$(port)" -- "$bin/transformer_train" --data synthetic --preset tiny \
  --synthetic-size 100 --epochs 2 --precision fp16 --clip 1 > "$work/bert.log" 2>&1 \
  || fail "data-parallel transformer_train (fp16, clip) failed" "$work/bert.log"
grep -q "epoch 2/2 .*train_loss [0-9]" "$work/bert.log" || fail "no finite loss" "$work/bert.log"

# 6. Sharded inference: two processes evaluate half the test set each; the sums make the same
#    loss and accuracy as one process evaluating all of it.
text=(--data synthetic --synthetic-classes 3 --synthetic-size 200 --seed 4)
"$bin/mlp_train" "${text[@]}" --epochs 1 --save-model "$work/mlp.st" > "$work/mlp.log" 2>&1 \
  || fail "mlp_train failed" "$work/mlp.log"
"$bin/mlp_train" "${text[@]}" --eval-only --load-model "$work/mlp.st" --metrics "$work/one.jsonl" \
  > "$work/one.log" 2>&1 || fail "eval failed" "$work/one.log"
"$launch" --nprocs 2 --master 127.0.0.1:"$(port)" -- "$bin/mlp_train" "${text[@]}" --eval-only \
  --load-model "$work/mlp.st" --metrics "$work/two.jsonl" > "$work/two.log" 2>&1 || fail "sharded eval failed" "$work/two.log"
python3 - "$work/one.jsonl" "$work/two.jsonl" <<'PY' || exit 1
import json, sys
one, two = (json.loads(open(p).read().splitlines()[-1]) for p in sys.argv[1:])
assert len(open(sys.argv[2]).read().splitlines()) == 1, "only rank 0 writes the metrics"
assert abs(one["val_loss"] - two["val_loss"]) < 1e-6 and one["val_accuracy"] == two["val_accuracy"], (one, two)
print(f"sharded inference: loss {two['val_loss']:.6f}, accuracy {two['val_accuracy']:.4f}, as one process")
PY

# 7. Errors: each one line and an exit status, never a hang.
expect() {  # CODE REGEX COMMAND...
  local code=$1 regex=$2; shift 2
  out=$("$@" 2>&1); rc=$?
  [[ $rc -eq $code ]] && grep -Eq -- "$regex" <<<"$out" || { echo "FAIL: $* -> $rc:"; echo "$out"; exit 1; }
}
expect 2 "--rank must be from 0 to 1 for world size 2 \(--world-size\), got 2" "$app" --world-size 2 --rank 2
# a rank from the environment (a launcher's) is named as such
expect 2 "\\\$RANK must be from 0 to 0 for world size 1 \(--world-size's default\), got 3" env RANK=3 "$app"
expect 2 "--master must be ADDR:PORT" "$app" --world-size 2 --master localhost
expect 2 "MASTER_PORT='0' is not a whole number" env MASTER_PORT=0 "$app" --world-size 2
expect 1 "cannot connect to rank 0 \(the master, 127.0.0.1:[0-9]+\)" \
  "$app" "${args[@]}" --world-size 2 --rank 1 --master 127.0.0.1:"$(port)" --dist-timeout 1
expect 1 "timed out after 1 s waiting for 1 more rank" \
  "$app" "${args[@]}" --world-size 2 --rank 0 --master 127.0.0.1:"$(port)" --dist-timeout 1
expect 2 "--nprocs must be a positive number" "$launch" --nprocs 0 -- "$app"
echo "ok: stopped together at step $step0, resumed with 2 and with 1 process(es)"

#!/usr/bin/env bash
# bad_inputs.sh APP FASHION_DIR CASE: one bad-input case of mnist_train; passes when the app
# exits non-zero with one clear message naming the cause (and never crashes or hangs).
set -uo pipefail
app=$1; data=$2; case=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
expect() {  # expect CODE REGEX -- COMMAND... (tests/cli/expect.sh, with a time limit)
  local code=$1 regex=$2; shift 3
  "$(dirname "$0")/expect.sh" "$code" "$regex" -- timeout 300 "$@" || exit 1
}
fake_data() {  # a copy of Fashion-MNIST whose FILE is replaced by BYTES (printf format)
  mkdir -p "$work/d"
  cp "$data"/* "$work/d/"
  rm -f "$work/d/$1"*
  printf "$2" > "$work/d/$1"
}
small=(--dataset fashion-mnist --model mlp --train-samples 512 --epochs 1 --threads 2)
case $case in
  corrupt_idx)
    fake_data train-images-idx3-ubyte '\x1f\x8b\x08\x00garbage'
    expect 1 "error: IDX file '.*train-images-idx3-ubyte'.*(corrupt|wrong magic|truncated)" -- "$app" "${small[@]}" --data-dir "$work/d" ;;
  truncated_idx)
    mkdir -p "$work/d"; cp "$data"/* "$work/d/"
    rm -f "$work/d/t10k-labels-idx1-ubyte"*  # (the data folder may hold it plain or gzipped)
    if [[ -f $data/t10k-labels-idx1-ubyte.gz ]]; then gzip -dc "$data/t10k-labels-idx1-ubyte.gz"
    else cat "$data/t10k-labels-idx1-ubyte"; fi | head -c 5000 > "$work/d/t10k-labels-idx1-ubyte"
    # (past the 8-byte header: the body is what is cut short)
    [[ $(stat -c %s "$work/d/t10k-labels-idx1-ubyte") -eq 5000 ]] || { echo "could not cut the labels"; exit 1; }
    expect 1 "t10k-labels-idx1-ubyte.*truncated" -- "$app" "${small[@]}" --data-dir "$work/d" ;;
  unreadable_file)
    mkdir -p "$work/d"; cp "$data"/* "$work/d/"
    rm "$work/d/train-labels-idx1-ubyte.gz"; mkdir "$work/d/train-labels-idx1-ubyte.gz"
    expect 1 "error: .*train-labels-idx1-ubyte" -- "$app" "${small[@]}" --data-dir "$work/d" ;;
  empty_dataset)
    fake_data train-images-idx3-ubyte '\x00\x00\x08\x03\x00\x00\x00\x00\x00\x00\x00\x1c\x00\x00\x00\x1c'
    printf '\x00\x00\x08\x01\x00\x00\x00\x00' > "$work/d/train-labels-idx1-ubyte"; rm -f "$work/d/train-labels-idx1-ubyte.gz"
    expect 1 "holds no images" -- "$app" "${small[@]}" --data-dir "$work/d" ;;
  checkpoint_mismatch)
    "$app" "${small[@]}" --data-dir "$data" --checkpoint-dir "$work/ck" > /dev/null 2>&1 || exit 1
    expect 1 "does not fit this model: .*(shape|not a tensor|missing)" -- "$app" "${small[@]}" --model cnn --data-dir "$data" --checkpoint-dir "$work/ck" --resume ;;
  corrupt_checkpoint)  # a byte of the newest checkpoint's tensor data flipped: the one before resumes
    "$app" "${small[@]}" --epochs 2 --data-dir "$data" --checkpoint-dir "$work/ck" > /dev/null 2>&1 || exit 1
    newest=$(ls "$work/ck"/ckpt-*.safetensors | tail -1)
    [[ $newest == */ckpt-0000000008.safetensors ]] || { echo "expected step 8 to be the newest, got $newest"; exit 1; }
    size=$(stat -c %s "$newest")
    printf 'XXXX' | dd of="$newest" bs=1 seek=$((size - 5)) conv=notrunc 2> /dev/null
    out=$(timeout 300 "$app" "${small[@]}" --epochs 3 --data-dir "$data" --checkpoint-dir "$work/ck" --resume 2>&1)
    rc=$?
    [[ $rc -eq 0 ]] || { echo "exit $rc, expected 0:"; echo "$out"; exit 1; }
    grep -Eq "warning: skipping .*ckpt-0000000008.*checksum mismatch" <<<"$out" \
      || { echo "no checksum warning for step 8:"; echo "$out"; exit 1; }
    grep -q "resumed from step 4" <<<"$out" || { echo "did not resume from step 4:"; echo "$out"; exit 1; }
    # none readable: an error, not a fresh start that would overwrite them
    for f in "$work/ck"/ckpt-*.safetensors; do
      size=$(stat -c %s "$f")
      printf 'XXXX' | dd of="$f" bs=1 seek=$((size - 5)) conv=notrunc 2> /dev/null
    done
    n=$(ls "$work/ck"/ckpt-*.safetensors | wc -l)
    expect 1 "none of the $n checkpoint\(s\) in '$work/ck' could be read" -- "$app" "${small[@]}" --epochs 3 \
      --data-dir "$data" --checkpoint-dir "$work/ck" --resume ;;
  checkpoint_dir_in_use)  # a fresh run would prune the other run's checkpoints
    "$app" "${small[@]}" --data-dir "$data" --checkpoint-dir "$work/ck" > /dev/null 2>&1 || exit 1
    expect 2 "holds checkpoints of an earlier run: pass --resume" -- "$app" "${small[@]}" --data-dir "$data" --checkpoint-dir "$work/ck"
    # a Bool flag set false is off (not "given, so on")
    expect 2 "holds checkpoints of an earlier run: pass --resume" -- "$app" "${small[@]}" --data-dir "$data" --checkpoint-dir "$work/ck" --resume=false ;;
  resume_other_batch_size)  # the position is kept in samples, not in batches
    "$app" "${small[@]}" --batch-size 64 --data-dir "$data" --checkpoint-dir "$work/ck" \
      --checkpoint-every 2 --keep-last 100 > /dev/null 2>&1 || exit 1
    ls "$work/ck"/ckpt-*.safetensors | tail -n +2 | xargs rm -f  # keep step 2: batch 2 of 8
    mkdir "$work/c2" "$work/c3"; cp "$work/ck"/ckpt-*.safetensors "$work/c2/"; cp "$work/ck"/ckpt-*.safetensors "$work/c3/"
    expect 0 "at batch size 64, this run has 1 at 32: epoch [0-9]+ continues at batch 4 instead of 2" -- "$app" "${small[@]}" --batch-size 32 --data-dir "$data" --checkpoint-dir "$work/ck" --resume
    # at 96 it continues at batch 1 (96 of the 128 samples done): the epoch's samples per
    # second count its 512 samples (the 128 had been kept: 544)
    expect 0 "continues at batch 1 instead of 2" -- "$app" "${small[@]}" --batch-size 96 --data-dir "$data" --checkpoint-dir "$work/c3" --resume --metrics "$work/m0.jsonl"
    python3 -c "import json,sys; r=json.loads(open(sys.argv[1]).readline()); n=r['samples_per_second']*r['seconds']; sys.exit(0 if abs(n-512)<1 else f'{n:.1f} samples counted in an epoch of 512')" "$work/m0.jsonl" || exit 1
    # a checkpoint of that resumed run (step 3: 2 steps of 64, 1 of 32; at batch 5 of 16),
    # resumed at 32 again: its schedule stands at step 5, as a run of 32 from the start
    "$app" "${small[@]}" --epochs 2 --batch-size 32 --data-dir "$data" --checkpoint-dir "$work/c2" \
      --resume --checkpoint-every 1 --keep-last 100 > /dev/null 2>&1 || exit 1
    find "$work/c2" -name 'ckpt-*.safetensors' ! -name 'ckpt-0000000003.safetensors' -delete
    "$app" "${small[@]}" --epochs 2 --batch-size 32 --data-dir "$data" --checkpoint-dir "$work/c2" \
      --resume --metrics "$work/m2.jsonl" > /dev/null 2>&1 || exit 1
    "$app" "${small[@]}" --epochs 2 --batch-size 32 --data-dir "$data" --metrics "$work/m1.jsonl" > /dev/null 2>&1 || exit 1
    lrs() { grep -o '"lr": [^,}]*' "$1" | tr '\n' ' '; }
    [[ -n $(lrs "$work/m1.jsonl") && $(lrs "$work/m2.jsonl") == "$(lrs "$work/m1.jsonl")" ]] || {
      echo "the schedule of a resumed run's resumed checkpoint stands elsewhere: $(lrs "$work/m2.jsonl") against $(lrs "$work/m1.jsonl")"; exit 1; } ;;
  resume_other_lr)  # this run's --lr wins, and says so
    "$app" "${small[@]}" --lr 0.002 --data-dir "$data" --checkpoint-dir "$work/ck" \
      --checkpoint-every 2 --keep-last 100 > /dev/null 2>&1 || exit 1
    ls "$work/ck"/ckpt-*.safetensors | tail -n +2 | xargs rm -f
    expect 0 "the checkpoint's run had learning rate 0.002, this run has 0.0005: continuing with 0.0005" -- "$app" "${small[@]}" --lr 0.0005 --data-dir "$data" --checkpoint-dir "$work/ck" --resume
    expect 0 "resumed from step" -- "$app" "${small[@]}" --lr 0.0005 --data-dir "$data" --checkpoint-dir "$work/ck" --resume
    # (its output whole, not piped into grep -q: a match would close the pipe, and the app's
    # SIGPIPE on its next line would make the pipeline fail and the check pass)
    out=$(timeout 300 "$app" "${small[@]}" --lr 0.0005 --data-dir "$data" --checkpoint-dir "$work/ck" --resume 2>&1) \
      || { echo "a resume with the checkpoint's --lr failed:"; echo "$out"; exit 1; }
    grep -q "resumed from step" <<< "$out" || { echo "did not resume:"; echo "$out"; exit 1; }
    if grep -q "had learning rate" <<< "$out"; then
      echo "a resume with the same --lr as the checkpoint's (saved by the last run) spoke of another:"; echo "$out"; exit 1
    fi
    # a constant learning rate (no schedule): the checkpoint's lr had replaced this run's
    "$app" "${small[@]}" --lr-schedule constant --lr 0.002 --data-dir "$data" --checkpoint-dir "$work/c2" \
      --checkpoint-every 2 --keep-last 100 > /dev/null 2>&1 || exit 1
    ls "$work/c2"/ckpt-*.safetensors | tail -n +2 | xargs rm -f
    expect 0 "had learning rate 0.002, this run has 0.0005: continuing with 0.0005" -- "$app" "${small[@]}" --lr-schedule constant --lr 0.0005 --data-dir "$data" --checkpoint-dir "$work/c2" --resume --metrics "$work/m.jsonl"
    grep -q '"lr": 0.0005[,}]' "$work/m.jsonl" || { echo "the resumed run did not train at 0.0005:"; cat "$work/m.jsonl"; exit 1; }
    # its newest checkpoint (of a constant-rate run) resumed with a schedule and another --lr
    expect 0 "had learning rate 0.0005, this run has 0.001: continuing with 0.001" -- "$app" "${small[@]}" --lr 0.001 --data-dir "$data" --checkpoint-dir "$work/c2" --resume ;;
  resume_drops_metrics)  # stopped between an epoch's metrics line and its checkpoint
    "$app" "${small[@]}" --epochs 2 --data-dir "$data" --checkpoint-dir "$work/ck" --keep-last 100 \
      --metrics "$work/m.jsonl" --tensorboard "$work/tb" --log-every 2 > /dev/null 2>&1 || exit 1
    rm "$(ls "$work/ck"/ckpt-*.safetensors | tail -1)"  # the last epoch's checkpoint, lost
    expect 0 "1 line\(s\) of epoch 2 on dropped from" -- "$app" "${small[@]}" --epochs 2 --data-dir "$data" \
      --checkpoint-dir "$work/ck" --resume --metrics "$work/m.jsonl" --tensorboard "$work/tb" --log-every 2
    [[ $(grep -c '"epoch": 1[,}]' "$work/m.jsonl") == 1 && $(grep -c '"epoch": 2[,}]' "$work/m.jsonl") == 1 ]] || {
      echo "not one line per epoch:"; cat "$work/m.jsonl"; exit 1; }
    # and TensorBoard drops the interrupted run's scalars past the checkpoint (each step once)
    python3 "$(dirname "$0")/../io/read_tfevents.py" --expect-resumed "$work/tb" || exit 1
    # a line a killed run left unfinished is dropped, not continued by the next one
    rm "$(ls "$work/ck"/ckpt-*.safetensors | tail -1)"
    printf '{"epoch": 1, "train_lo' >> "$work/m.jsonl"
    expect 0 "line\(s\) of epoch 2 on dropped from" -- "$app" "${small[@]}" --epochs 2 --data-dir "$data" \
      --checkpoint-dir "$work/ck" --resume --metrics "$work/m.jsonl"
    python3 -c 'import json, sys; [json.loads(l) for l in open(sys.argv[1])]' "$work/m.jsonl" || {
      echo "not JSON lines:"; cat "$work/m.jsonl"; exit 1; }
    # no checkpoint at all (the run stopped before its first): its lines go, it starts over
    rm "$work/ck"/ckpt-*.safetensors
    expect 0 "line\(s\) of epoch 1 on dropped from" -- "$app" "${small[@]}" --epochs 2 --data-dir "$data" \
      --checkpoint-dir "$work/ck" --resume --metrics "$work/m.jsonl"
    [[ $(grep -c '"epoch": 1[,}]' "$work/m.jsonl") == 1 && $(grep -c '"epoch": 2[,}]' "$work/m.jsonl") == 1 ]] || {
      echo "not one line per epoch after starting over:"; cat "$work/m.jsonl"; exit 1; } ;;
  resume_metrics_not_a_file)  # --metrics /dev/stdout: a resume does not read its own output
    "$app" "${small[@]}" --data-dir "$data" --checkpoint-dir "$work/ck" --metrics /dev/stdout > /dev/null 2>&1 || exit 1
    expect 0 "'/dev/stdout' is not a regular file: lines of epoch 2 on are not dropped" -- "$app" "${small[@]}" \
      --epochs 2 --data-dir "$data" --checkpoint-dir "$work/ck" --resume --metrics /dev/stdout ;;
  metrics_write_fails)  # a full disk under --metrics: the epoch's checkpoint is still written
    expect 1 "writing to '/dev/full' failed: No space left on device" -- "$app" "${small[@]}" --data-dir "$data" \
      --checkpoint-dir "$work/ck" --metrics /dev/full
    ls "$work/ck"/ckpt-*.safetensors > /dev/null 2>&1 || { echo "no checkpoint of the epoch"; exit 1; } ;;
  resume_without_dir)
    expect 2 "--resume needs --checkpoint-dir" -- "$app" "${small[@]}" --data-dir "$data" --resume ;;
  nan_loss)
    expect 1 "training loss became (NaN|infinite) at epoch 1" -- "$app" "${small[@]}" --data-dir "$data" --optimizer sgd --lr 1e12 --log-every 1 ;;
  constant_images)  # every training pixel equal: normalised with a floored deviation, no NaN
    mkdir -p "$work/d"; cp "$data"/t10k-* "$work/d/"
    { printf '\x00\x00\x08\x03\x00\x00\x02\x00\x00\x00\x00\x1c\x00\x00\x00\x1c'; head -c $((512 * 784)) /dev/zero; } \
      > "$work/d/train-images-idx3-ubyte"
    { printf '\x00\x00\x08\x01\x00\x00\x02\x00'; head -c 512 /dev/zero; } > "$work/d/train-labels-idx1-ubyte"
    expect 0 "epoch 1/1 .*train_loss [0-9]" -- "$app" "${small[@]}" --data-dir "$work/d" ;;
  non_utf8_path)  # a Latin-1 byte in the command line: recorded as U+FFFD, the checkpoint saved
    mkdir -p "$work/ck"$'\xe9'
    expect 0 "epoch 1/1" -- "$app" "${small[@]}" --data-dir "$data" --checkpoint-dir "$work/ck"$'\xe9' \
      --save-model "$work/ck"$'\xe9'/m.safetensors
    ls "$work/ck"$'\xe9'/ckpt-*.safetensors > /dev/null && [[ -s "$work/ck"$'\xe9'/m.safetensors ]] \
      || { echo "no checkpoint or model written"; exit 1; }
    # the header is strict UTF-8 JSON, its command line with the byte as U+FFFD
    python3 - "$work/ck"$'\xe9'/m.safetensors <<'PY' || exit 1
import json, struct, sys
d = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", d[:8])[0]
command = json.loads(d[8:8 + n].decode("utf-8"))["__metadata__"]["command"]
assert "ck\ufffd/m.safetensors" in command, command
print("ok: command line recorded as", ascii(command[-40:]))
PY
    ;;
  bad_notify)  # a failing notification never fails the training, and is reported
    expect 0 "warning: notify command exited with status 7" -- "$app" "${small[@]}" --data-dir "$data" --notify-cmd 'exit 7' ;;
  unwritable_metrics)
    expect 1 "cannot open '/nonexistent/m.jsonl'" -- "$app" "${small[@]}" --data-dir "$data" --metrics /nonexistent/m.jsonl
    # a folder that exists but takes no new files (even for root): refused before training
    out=$(timeout 300 "$app" "${small[@]}" --data-dir "$data" --metrics /proc/libnn_m.jsonl 2>&1); rc=$?
    if [[ $rc -ne 1 ]] || ! grep -q "cannot open '/proc/libnn_m.jsonl' for writing (--metrics)" <<<"$out" \
       || grep -q "epoch 1" <<<"$out"; then
      echo "expected exit 1 before training, got $rc:"; echo "$out"; exit 1
    fi
    # a file that is there: the check leaves its contents alone
    echo '{"epoch": 0}' > "$work/m.jsonl"
    expect 0 "" -- "$app" "${small[@]}" --data-dir "$data" --metrics "$work/m.jsonl"
    [[ $(head -1 "$work/m.jsonl") == '{"epoch": 0}' && $(wc -l < "$work/m.jsonl") -eq 2 ]] \
      || { echo "metrics file after the run:"; cat "$work/m.jsonl"; exit 1; } ;;
  unwritable_tensorboard)  # checked before the data is read (the data folder is missing too)
    touch "$work/afile"
    expect 1 "cannot create the folder '$work/afile/tb' \(--tensorboard\)" -- "$app" "${small[@]}" \
      --data-dir /nonexistent --tensorboard "$work/afile/tb"
    # the checkpoint folder too (its first checkpoint comes an epoch in)
    expect 1 "cannot create the folder '$work/afile/ck' \(--checkpoint-dir\)" -- "$app" "${small[@]}" \
      --data-dir /nonexistent --checkpoint-dir "$work/afile/ck"
    expect 2 "--threads must be at most 1024" -- "$app" "${small[@]}" --data-dir /nonexistent --threads 100000 ;;
  log_flushed)  # each progress line reaches a log file as it is printed, not at exit
    source "$(dirname "$0")/wait_checkpoint.sh"
    "$app" "${small[@]}" --train-samples 60000 --data-dir "$data" --log-every 1 --checkpoint-every 2 \
      --checkpoint-dir "$work/ck" > "$work/log" 2>&1 &
    pid=$!
    wait_checkpoint "$work/ck" || { kill -9 $pid; cat "$work/log"; exit 1; }
    # Held still at once: checkpoint N is written after step N's line was printed, so that
    # line must be in the file now. (Read later, a buffer of a few KiB, some 70 steps'
    # lines, could have filled and been written out in the meantime.)
    kill -STOP $pid
    newest=$(compgen -G "$work/ck/ckpt-*.safetensors" | sort | tail -1)
    step=${newest##*/ckpt-}; step=$((10#${step%.safetensors}))
    ok=0; grep -q "^epoch 1 batch $step/" "$work/log" && ok=1
    kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
    [[ $ok -eq 1 ]] || { echo "step $step's line was not in the log when its checkpoint was:"; cat "$work/log"; exit 1; } ;;
  *) echo "unknown case $case"; exit 2 ;;
esac

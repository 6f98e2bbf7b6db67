#!/usr/bin/env bash
# cuda_cli.sh APP FASHION_DIR CASE DEVICE: mnist_train's CUDA paths from the command line, in a
# build with the CUDA backend. DEVICE says what runs it: "gpu" (a real GPU may be present;
# the cases that need one exit 77, reported as skipped, when `nvidia-smi -L` finds none) or
# "emulator" (the CUDA emulator's device, tests/cuda_emu, always present).
#   no_gpu         --device cuda with every GPU hidden: one clear error, exit 1
#   old_driver     a driver older than the runtime (emulator only, LIBNN_CUDA_EMU_DRIVER):
#                  the error says so, where "no device" would hide it
#   out_of_memory  a batch larger than the device's memory: one clear error, exit 1
#                  (emulator only, whose memory size LIBNN_CUDA_EMU_MEMORY sets; on a real
#                  GPU, and on the emulator too, cli_cuda_bench_out_of_memory asks for 120 GB)
#   cross_device   a checkpoint written on the CPU resumes on CUDA and the other way round:
#                  loaded and saved again on the other device, the weights are bit-identical,
#                  and training goes on there
#   data_parallel  two processes on one device (scripts/dist_launch.sh): gradients averaged
#                  through host memory; the app checks after every epoch that the replicas
#                  are bit-identical; the loss matches the same run on the CPU
set -uo pipefail
app=$1; data=$2; case=$3; device=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
have_device() {
  [[ $device == emulator ]] && return 0
  nvidia-smi -L > /dev/null 2>&1 || { echo "no GPU: skipped"; exit 77; }
}
expect() {  # expect CODE REGEX -- COMMAND... (tests/cli/expect.sh, with a time limit)
  local code=$1 regex=$2; shift 3
  "$(dirname "$0")/expect.sh" "$code" "$regex" -- timeout 600 "$@" || exit 1
}
# tensor bytes of a safetensors file (the header differs by the command line)
body() {
  python3 -c 'import struct,sys; d=open(sys.argv[1],"rb").read(); n=struct.unpack("<Q",d[:8])[0]; sys.stdout.buffer.write(d[8+n:])' "$1"
}
small=(--dataset fashion-mnist --data-dir "$data" --model mlp --train-samples 256
       --test-samples 200 --batch-size 64 --seed 5 --threads 2 --log-every 1000)
case $case in
  no_gpu)
    expect 1 "error: device cuda:0 asked for, but no CUDA device is present" -- \
      env CUDA_VISIBLE_DEVICES= "$app" "${small[@]}" --epochs 1 --device cuda ;;
  old_driver)
    [[ $device == emulator ]] || { echo "needs the emulator's driver version: skipped"; exit 77; }
    expect 1 "error: device cuda:0 asked for, but no CUDA device is present: the NVIDIA driver supports CUDA up to 12.4, older than the CUDA [0-9.]+ runtime libnn was built with" -- \
      env LIBNN_CUDA_EMU_DRIVER=12040 "$app" "${small[@]}" --epochs 1 --device cuda
    # no driver at all is plain absence
    expect 1 "error: device cuda:0 asked for, but no CUDA device is present$" -- \
      env LIBNN_CUDA_EMU_DRIVER=0 "$app" "${small[@]}" --epochs 1 --device cuda ;;
  out_of_memory)
    [[ $device == emulator ]] || { echo "needs the emulator's memory limit: skipped"; exit 77; }
    # 400 MB of device memory: the data set (219 MB) fits, a 60,000-sample batch does not
    expect 1 "error: out of memory on cuda:0: tried to allocate [0-9.]+ [MG]iB" -- \
      env LIBNN_CUDA_EMU_MEMORY=400000000 "$app" "${small[@]}" --train-samples 0 \
      --batch-size 60000 --epochs 1 --device cuda ;;
  cross_device)
    have_device
    for from in cpu cuda; do
      to=cpu; [[ $from == cpu ]] && to=cuda
      ck=$work/ck-$from
      # one epoch on $from, checkpointed; its final weights
      expect 0 "epoch 1/1" -- "$app" "${small[@]}" --epochs 1 --device $from \
        --checkpoint-dir "$ck" --save-model "$work/$from.safetensors"
      # resumed on $to with nothing left to train: loaded there, saved from there
      expect 0 "resumed from step 4 \(epoch 2, batch 0\)" -- "$app" "${small[@]}" --epochs 1 \
        --device $to --checkpoint-dir "$ck" --resume --save-model "$work/$from-on-$to.safetensors"
      [[ -s "$work/$from.safetensors" && -s "$work/$from-on-$to.safetensors" ]] \
        || { echo "a model file of the $from -> $to round trip is missing"; exit 1; }
      cmp -s <(body "$work/$from.safetensors") <(body "$work/$from-on-$to.safetensors") \
        || { echo "weights written on $from differ after a round trip through $to"; exit 1; }
      echo "ok: $from -> $to round trip bit-identical"
      # and training goes on there: epoch 2 from the checkpoint, a finite loss
      expect 0 "epoch 2/2 .*train_loss [0-9]" -- "$app" "${small[@]}" --epochs 2 \
        --device $to --checkpoint-dir "$ck" --resume
    done ;;
  data_parallel)
    have_device
    launch=$(dirname "$0")/../../scripts/dist_launch.sh
    port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
    for d in cuda:0 cpu; do
      expect 0 "epoch 2/2 .*val_accuracy" -- "$launch" --nprocs 2 \
        --master 127.0.0.1:"$(port)" -- "$app" "${small[@]}" --epochs 2 --device $d \
        --metrics "$work/$d.jsonl"
    done
    python3 - "$work/cuda:0.jsonl" "$work/cpu.jsonl" <<'PY' || exit 1
import json, sys
gpu, cpu = (json.loads(open(p).read().splitlines()[-1]) for p in sys.argv[1:])
print(f"val_loss: cuda {gpu['val_loss']:.6f}, cpu {cpu['val_loss']:.6f}")
assert abs(gpu["val_loss"] - cpu["val_loss"]) < 1e-3 * max(1, abs(cpu["val_loss"])), (gpu, cpu)
PY
    ;;
  *) echo "unknown case $case"; exit 2 ;;
esac

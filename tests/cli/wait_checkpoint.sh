# Sourced by the command-line tests. wait_checkpoint DIR: waits (up to 60 s) until DIR holds
# a checkpoint, so a test can stop a run mid-training after its first one.
wait_checkpoint() {
  for _ in $(seq 1 600); do
    compgen -G "$1/ckpt-*.safetensors" > /dev/null && return 0
    sleep 0.1
  done
  return 1
}

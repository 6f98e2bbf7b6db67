# Sourced by the command-line tests. wait_checkpoint DIR: waits (up to 300 s: the sanitizer
# stage runs these beside other tests on two cores) until DIR holds a checkpoint, so a test
# can stop a run mid-training after its first one; says so and returns 1 if none came.
wait_checkpoint() {
  for _ in $(seq 1 3000); do
    compgen -G "$1/ckpt-*.safetensors" > /dev/null && return 0
    sleep 0.1
  done
  echo "wait_checkpoint: no checkpoint in $1 after 300 s"
  return 1
}

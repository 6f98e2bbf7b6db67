# Sourced by the command-line tests. Finds processes by their command line with bash alone
# (no procps, which a fresh Debian lacks), robust to processes that end while /proc is read:
#   pids_with TEXT   prints the PIDs of the processes (this shell's and its subshells' left
#                    out) whose command line holds TEXT; status 0 when there are any.
#   alive PID        status 0 when PID runs (a zombie, dead but not yet waited for, does not).
pids_with() {
  local f pid found=1 args
  for f in /proc/[0-9]*/cmdline; do
    pid=${f#/proc/}; pid=${pid%/cmdline}
    [[ $pid == "$$" || $pid == "$BASHPID" ]] && continue
    # (a process gone since the glob, or a zombie, reads as nothing)
    mapfile -d '' args 2> /dev/null < "$f" || continue
    [[ ${#args[@]} -gt 0 && "${args[*]}" == *"$1"* ]] || continue
    echo "$pid"
    found=0
  done
  return $found
}
alive() {
  local stat
  { stat=$(< "/proc/$1/stat"); } 2> /dev/null || return 1
  stat=${stat##*) }  # (the name in parentheses may hold anything)
  [[ ${stat:0:1} != Z ]]
}

#!/usr/bin/env bash
# expect.sh CODE REGEX -- COMMAND...: runs COMMAND, passes when it exits with CODE and its
# combined output matches the extended regex REGEX.
set -uo pipefail
code=$1; regex=$2; shift 3
out=$("$@" 2>&1); rc=$?
if [[ $rc -ne $code ]]; then
  echo "expected exit code $code, got $rc; output:"; echo "$out"; exit 1
fi
if ! grep -Eq -- "$regex" <<<"$out"; then
  echo "output does not match /$regex/:"; echo "$out"; exit 1
fi
echo "ok: exit $rc, output matches /$regex/"

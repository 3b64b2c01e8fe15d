#!/bin/sh
# Run a command that must fail: non-zero exit AND output matching a regex.
#   expect_fail.sh REGEX TIMEOUT_S command args...
set -u
regex=$1 limit=$2
shift 2
out=$(timeout "$limit" "$@" 2>&1)
rc=$?
printf '%s\n' "$out"
if [ $rc -eq 124 ]; then echo "expect_fail: timed out after ${limit}s (a hang)"; exit 1; fi
if [ $rc -eq 0 ]; then echo "expect_fail: exit 0, expected a failure"; exit 1; fi
if ! printf '%s\n' "$out" | grep -E -q "$regex"; then
  echo "expect_fail: output does not match /$regex/"; exit 1
fi
echo "expect_fail: failed as expected (exit $rc)"
exit 0

#!/bin/sh
# sg-ns2d on a full disk: a tmpfs too small for its output (mounting one
# needs root; otherwise the test is skipped, exit 77). The run must fail
# with a message naming the file and saying "no space left on device",
# and leave no file at the output path (nor its .partial), so nothing
# reads it as a dataset later.
#   ns2d_enospc.sh BIN_DIR MPIEXEC
set -u
bin=$1 mpiexec=$2
dir=$(mktemp -d "${TMPDIR:-/tmp}/sg-enospc.XXXXXX") || exit 1
if ! mount -t tmpfs -o size=160k tmpfs "$dir" 2>/dev/null; then
  rmdir "$dir"
  echo "cannot mount a tmpfs (not root?): skipped"
  exit 77
fi
out="$dir/ns.nc"
log=$(timeout 120 "$mpiexec" -n 2 "$bin/sg-ns2d" --out "$out" --n 32 --samples 16 --frames 4 --mesh h=2 2>&1)
rc=$?
printf '%s\n' "$log"
fail=0
if [ $rc -eq 124 ]; then echo "ns2d_enospc: timed out (a hang)"; fail=1; fi
if [ $rc -eq 0 ]; then echo "ns2d_enospc: exit 0 on a full disk"; fail=1; fi
printf '%s\n' "$log" | grep -q "$out: no space left on device" ||
  { echo "ns2d_enospc: no message naming $out and 'no space left on device'"; fail=1; }
if [ -e "$out" ] || [ -e "$out.partial" ]; then
  echo "ns2d_enospc: the failed run left a file:"; ls -l "$dir"; fail=1
fi
umount "$dir" && rmdir "$dir"
[ $fail -eq 0 ] && echo "ns2d_enospc: failed cleanly as expected"
exit $fail

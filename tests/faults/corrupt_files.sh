#!/bin/sh
# Damaged input files given to sg-train: a clear error naming the file, a
# non-zero exit on every rank (hydra's -print-all-exitcodes, without its
# clean-up so each status is the rank's own), no hang.
#   corrupt_files.sh ckpt|data BIN_DIR MPIEXEC DATA WORK_DIR [NCCOPY]
# ckpt: --resume with a checkpoint (written here, 2 steps) cut in its data
#   or its header, with a flipped byte in an array (read on h=2 and w=2) or
#   in the metadata (the config text), missing, and a NetCDF file that is
#   not a checkpoint (the dataset). (Empty and random files go through the
#   same open as a dataset's: the data case has them.)
# data: --data cut in its data or header, with a broken magic number,
#   empty, random bytes, missing, and (NCCOPY given) a netCDF-4/HDF5 copy
#   cut short; each with the default backend and the serial one.
set -u
kind=$1 bin=$2 mpiexec=$3 data=$4 work=$5 nccopy=${6:-}
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
export OMP_NUM_THREADS=1
cfg="--batch 2 --modes 2 --width 4 --layers 1 --proj-width 8 --history 2 --test-samples 2
     --deterministic --schedule constant --log-level warn --steps 4"
fail=0
bad() { echo "FAIL: $*"; fail=1; }

# expect_error REGEX sg-train-args...: fails, says REGEX, every rank non-zero
expect_error() {
  regex=$1
  shift
  # shellcheck disable=SC2086
  out=$(timeout -s KILL 60 "$mpiexec" -disable-auto-cleanup -print-all-exitcodes -n 2 "$bin/sg-train" \
        $cfg "$@" 2>&1)
  rc=$?
  err=$(printf '%s\n' "$out" | grep "error:" | head -1)
  codes=$(printf '%s\n' "$out" | sed -n 's/.*Exit codes: \[[^]]*\] //p' | tr ',' ' ')
  echo "[$*] -> exit $rc: $err"
  if [ $rc -eq 137 ]; then bad "[$*] hung (killed after 60 s)"; return; fi
  [ $rc -ne 0 ] || bad "[$*] exit 0"
  printf '%s\n' "$out" | grep -Eq "$regex" || { printf '%s\n' "$out"; bad "[$*] no message matching /$regex/"; }
  [ -n "$codes" ] || bad "[$*] no per-rank exit codes"
  for c in $codes; do [ "$c" -ne 0 ] || bad "[$*] a rank exited 0 (statuses $codes)"; done
}

# copies of $1 damaged in various ways, named by the damage
cut_to() { head -c "$3" "$1" >"$2"; }
flip() { # FILE OFFSET: change one byte
  b=$(od -An -tu1 -j "$2" -N1 "$1" | tr -d ' ')
  printf "$(printf '\\%03o' $(((b + 1) % 256)))" | dd of="$1" bs=1 seek="$2" conv=notrunc 2>/dev/null
}
: >empty.nc
head -c 4096 /dev/urandom >random.nc

if [ "$kind" = ckpt ]; then
  # shellcheck disable=SC2086
  "$mpiexec" -n 2 "$bin/sg-train" --data "$data" $cfg --steps 2 --mesh h=2 --ckpt-dir ck >make.log 2>&1 ||
    { cat make.log; echo "FAIL: cannot write a checkpoint"; exit 1; }
  good=ck/step_000002.nc
  size=$(wc -c <"$good")
  hdr=$(grep -abo "batch = 2" "$good" | head -1 | cut -d: -f1) # the config text
  cut_to "$good" cut_data.nc $((size - 1000))
  cut_to "$good" cut_header.nc 1500
  cp "$good" flip_array.nc && flip flip_array.nc $((size - 200))
  cp "$good" flip_meta.nc && flip flip_meta.nc $((hdr + 8))
  r="--data $data --mesh h=2 --resume"
  expect_error "cut_data.nc is truncated" $r cut_data.nc
  expect_error "cut_header.nc: corrupt NetCDF header" $r cut_header.nc
  expect_error "checkpoint flip_array.nc: array [^ ]* fails its checksum" $r flip_array.nc
  expect_error "checkpoint flip_array.nc: array [^ ]* fails its checksum" --data "$data" --mesh w=2 \
    --resume flip_array.nc
  expect_error "checkpoint flip_meta.nc: step/RNG/data position/config/mesh fail their checksum" \
    $r flip_meta.nc
  expect_error "cannot open missing.nc: no such file" $r missing.nc
  expect_error "$data is not a shardgrid checkpoint" $r "$data"
  # the intact checkpoint still resumes (the damage was in the copies)
  # shellcheck disable=SC2086
  "$mpiexec" -n 2 "$bin/sg-train" $cfg $r "$good" >ok.log 2>&1 || { cat ok.log; bad "the intact checkpoint failed"; }
else
  size=$(wc -c <"$data")
  cut_to "$data" cut_data.nc $((size / 2))
  cut_to "$data" cut_header.nc 600
  cp "$data" bad_magic.nc && flip bad_magic.nc 1
  set -- "cut_data.nc is truncated" cut_data.nc \
         "cut_header.nc: corrupt NetCDF header" cut_header.nc \
         "cannot open bad_magic.nc: not a NetCDF file" bad_magic.nc \
         "cannot open empty.nc: not a NetCDF file" empty.nc \
         "cannot open random.nc: not a NetCDF file" random.nc \
         "cannot open missing.nc: no such file" missing.nc
  if [ -n "$nccopy" ] && "$nccopy" -k nc4 "$data" nc4.nc; then
    cut_to nc4.nc cut_nc4.nc $(($(wc -c <nc4.nc) * 3 / 4))
    set -- "$@" "cannot open cut_nc4.nc: bad or truncated file" cut_nc4.nc
  else
    echo "no nccopy: the netCDF-4 case is left out"
  fi
  while [ $# -gt 0 ]; do
    for be in auto serial; do expect_error "$1" --mesh h=2 --backend $be --data "$2"; done
    shift 2
  done
fi
[ $fail -eq 0 ] && echo "corrupt_files $kind: every damaged file refused as expected"
exit $fail

#!/bin/sh
# Faults during a sg-train run, under MPICH's mpiexec (hydra), on a tiny
# FNO (16x16 grid, 2-3 ranks); see docs/reliability.md, "Fault tests".
#   train_faults.sh CASE BIN_DIR MPIEXEC DATA WORK_DIR SRC_DIR [SHIM]
# CASE:
#   kill_rank           SIGKILL to rank 1 during training: the launcher ends
#                       the job at once (non-zero, "Killed (signal 9)"); the
#                       last complete checkpoint loads and resuming it gives
#                       the losses of an uninterrupted run
#   kill_rank_nocleanup the same with mpiexec -disable-auto-cleanup and
#                       SG_TIMEOUT=3: the job still ends within seconds
#   stop_rank_timeout   SIGSTOP to rank 1 (alive but silent, like a lost
#                       node) with SG_TIMEOUT=3: the others time out naming
#                       rank 1 and abort
#   stop_rank_in_ckpt   rank 0 stops (SIGSTOP, by SHIM) at its first write of
#                       the checkpoint of step 4, SG_TIMEOUT=3: rank 1,
#                       waiting in PnetCDF's MPI-IO collectives (no timeout
#                       of their own), is ended by the io watchdog; step 2's
#                       checkpoint loads and resumes
#   sigterm_launcher,   the signal to mpiexec: hydra forwards it to every
#   sigint_launcher     rank; they stop at the next step boundary, write a
#                       checkpoint, say so, and exit 128+signal; resuming
#                       the checkpoint gives the uninterrupted run's losses
#   sigterm_one_rank    SIGTERM to rank 2 of 3 only: every rank stops (each
#                       rank's own exit status checked)
#   sigterm_pp          sigterm_launcher on a pipeline (the CNN on pp=2):
#                       the stop writes the pipeline's one checkpoint, which
#                       resumes with the uninterrupted run's losses
#   ckpt_enospc         a full disk during the checkpoint of step 4 (SHIM,
#                       an LD_PRELOAD library): while writing the header, and
#                       after 8 KiB (the data); every rank fails naming the
#                       file and "no space left on device", no .tmp is left,
#                       step 2's checkpoint loads and resumes
#   ckpt_erofs          a read-only file system at the checkpoint of step 4:
#                       the same, naming "Read-only file system"
# Exit 0 when every check holds; each failed check prints a line.
set -u
case_=$1 bin=$2 mpiexec=$3 data=$4 work=$5 src=$6 shim=${7:-}
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
work=$(pwd -P)
export OMP_NUM_THREADS=1
cfg="--data $data --batch 2 --modes 2 --width 4 --layers 1 --proj-width 8 --history 2
     --test-samples 2 --deterministic --schedule constant --log-level warn --log-every 1"
cmp="python3 $src/tests/examples/compare_losses.py"
fail=0
bad() { echo "FAIL ($case_): $*"; fail=1; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# start NP ranks of sg-train in the background (log: run.log); extra
# mpiexec options in MPIOPTS; a hang is cut at 90 s by timeout
MPIOPTS=
start() {
  np=$1
  shift
  # shellcheck disable=SC2086
  timeout -s KILL 90 "$mpiexec" -print-all-exitcodes $MPIOPTS -n "$np" "$bin/sg-train" $cfg "$@" \
    >run.log 2>&1 &
  tpid=$!
  mpid=
  for _ in $(seq 50); do
    mpid=$(pgrep -P "$tpid" | head -1)
    [ -n "$mpid" ] && break
    sleep 0.1
  done
}
alive() { [ -n "$(ps -o stat= -p "$1" 2>/dev/null | grep -v Z)" ]; }
# wait until rank 0 printed step N (or the run ended)
wait_step() {
  for _ in $(seq 600); do
    grep -Eq "^step +$1/" run.log && return 0
    alive "$tpid" || break
    sleep 0.1
  done
  bad "step $1 never came"
  give_up
}
give_up() {
  kill -9 "$tpid" "$mpid" 2>/dev/null
  wait "$tpid"
  cat run.log
  exit 1
}
# the pid of rank R (hydra: mpiexec -> proxy -> ranks, PMI_RANK in the environment)
rank_pid() {
  for proxy in $(pgrep -P "$mpid"); do
    for p in $(pgrep -P "$proxy"); do
      tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "PMI_RANK=$1" && echo "$p" && return 0
    done
  done
  return 1
}
# wait for the end; must come within LIMIT s of T0; sets rc
finish() {
  wait "$tpid"
  rc=$?
  took=$(elapsed "$t0")
  cat run.log
  echo "($case_: launcher exit status $rc, $took s after the fault)"
  [ "$rc" -eq 137 ] && bad "the run hung (killed by the test after 90 s)"
  awk -v t="$took" -v l="$1" 'BEGIN { exit !(t <= l) }' || bad "the run took $took s to end (limit $1 s)"
}
# every rank's exit status (hydra -print-all-exitcodes: wait statuses).
# Hydra kills the other ranks as soon as one exits non-zero and lists 0 for
# them; after it forwarded a signal it lists 0 for ranks that exited
# 128+signal (strace shows their exit_group(130) and the proxy reaping 130):
# there (CLEANED=1) a 0 is accepted. Under -disable-auto-cleanup and
# without a forwarded signal each status is the rank's own.
codes() { sed -n 's/.*Exit codes: \[[^]]*\] //p' run.log | tr ',' ' '; }
CLEANED=0
all_codes() { # WANT: exact exit status, or "nonzero"
  c=$(codes)
  [ -n "$c" ] || { bad "no per-rank exit codes printed"; return; }
  for s in $c; do
    [ "$CLEANED" = 1 ] && [ "$s" -eq 0 ] && continue
    if [ "$1" = nonzero ]; then [ "$s" -ne 0 ] || bad "a rank exited 0 (statuses: $c)"
    else [ "$s" -eq $(($1 * 256)) ] || bad "a rank's wait status is $s, not exit $1 (statuses: $c)"; fi
  done
}
no_leftovers() {
  sleep 0.2
  for p in $(pgrep -x sg-train); do
    [ "$(readlink "/proc/$p/cwd")" = "$work" ] && { bad "rank process $p left behind"; kill -9 "$p"; }
  done
}
expect() { grep -Eq "$1" run.log || bad "no message matching /$1/"; }
# the newest complete checkpoint in ck/ (a .tmp is not one)
last_ckpt() { ls ck/step_*.nc 2>/dev/null | tail -1; }
ckpt_step() { basename "$1" .nc | sed 's/^step_0*//'; }
# the checkpoint loads and the run continues (NP ranks, MESH) for 2 more
# steps; with "compare", those steps and the interrupted run's equal an
# uninterrupted run's bit for bit (deterministic mode, same mesh)
resume_check() {
  ck=$1 np=$2 mesh=$3 how=${4:-}
  [ -f "$ck" ] || { bad "no checkpoint to resume"; return; }
  s=$(ckpt_step "$ck")
  to=$((s + 2))
  # shellcheck disable=SC2086
  timeout 90 "$mpiexec" -n "$np" "$bin/sg-train" $cfg --mesh "$mesh" --steps "$to" --resume "$ck" \
    --metrics res.jsonl >res.log 2>&1 || { cat res.log; bad "resuming $ck failed"; return; }
  echo "resumed $ck: steps $((s + 1))-$to done"
  [ "$how" = compare ] || return
  # shellcheck disable=SC2086
  timeout 90 "$mpiexec" -n "$np" "$bin/sg-train" $cfg --mesh "$mesh" --steps "$to" --metrics ref.jsonl \
    >ref.log 2>&1 || { cat ref.log; bad "the reference run failed"; return; }
  $cmp res.jsonl ref.jsonl 0 || bad "resumed losses differ from the uninterrupted run"
  $cmp int.jsonl ref.jsonl 0 || bad "the interrupted run's losses differ from the uninterrupted run"
}

# a process fault at step 3 of a long run (checkpoints every 2 steps)
fault_at_step3() { # SIGNAL TARGET(launcher|RANK)
  wait_step 3
  if [ "$2" = launcher ]; then p=$mpid; else p=$(rank_pid "$2"); fi
  [ -n "$p" ] || { bad "no process for $2"; give_up; }
  t0=$(now)
  kill -s "$1" "$p"
}

case $case_ in
kill_rank | kill_rank_nocleanup)
  if [ "$case_" = kill_rank_nocleanup ]; then
    MPIOPTS="-disable-auto-cleanup -genv SG_TIMEOUT 3"
  fi
  start 2 --mesh h=2 --steps 100000 --ckpt-dir ck --ckpt-every 2 --metrics int.jsonl
  fault_at_step3 KILL 1
  finish 20
  [ "$rc" -ne 0 ] || bad "exit status 0 after a rank was killed"
  [ "$case_" = kill_rank ] && expect "Killed \(signal 9\)"
  no_leftovers
  ls ck
  # int.jsonl: the killed run's metrics (flushed every step)
  resume_check "$(last_ckpt)" 2 h=2 $([ "$case_" = kill_rank ] && echo compare)
  ;;
stop_rank_timeout)
  MPIOPTS="-genv SG_TIMEOUT 3" # above any legitimate wait of these tiny runs
  start 2 --mesh h=2 --steps 100000
  fault_at_step3 STOP 1
  finish 30
  [ "$rc" -ne 0 ] || bad "exit status 0 after a rank stopped"
  # rank 0 waits either in sg_agree ("ranks that did not arrive ...: 1")
  # or in the FFT transpose's barrier ("waiting for rank 1 ..., which did
  # not arrive"), depending on where rank 1 was stopped: both name rank 1
  expect "timed out.*(did not arrive \(no answer within [0-9]+ s\): 1 |waiting for rank 1 .*which did not arrive)"
  no_leftovers
  ;;
stop_rank_in_ckpt)
  [ -f "$shim" ] || { echo "no fault shim: skipped"; exit 77; }
  MPIOPTS="-genv SG_TIMEOUT 3 -genv LD_PRELOAD $shim -genv SG_FAULT STOP -genv SG_FAULT_PATH step_000004
           -genv SG_FAULT_RANK 0 -genv ASAN_OPTIONS ${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
  t0=$(now)
  start 2 --mesh h=2 --steps 6 --ckpt-dir ck --ckpt-every 2
  finish 60
  [ "$rc" -ne 0 ] || bad "exit status 0 after a rank stopped"
  expect "timed out after 3 s \(SG_TIMEOUT\)"
  no_leftovers
  ls ck
  resume_check ck/step_000002.nc 2 h=2
  ;;
sigterm_launcher | sigint_launcher | sigterm_one_rank | sigterm_pp)
  np=2 mesh=h=2 target=launcher sig=TERM code=143 name=SIGTERM
  [ "$case_" = sigterm_pp ] && mesh=pp=2 cfg="$cfg --model cnn --blocks 2 --groups 2"
  [ "$case_" = sigint_launcher ] && sig=INT code=130 name=SIGINT
  # to one rank: every rank's own status, without hydra's clean-up
  [ "$case_" = sigterm_one_rank ] && np=3 mesh=h=3 target=2 MPIOPTS=-disable-auto-cleanup
  [ "$case_" = sigterm_one_rank ] || CLEANED=1
  start $np --mesh $mesh --steps 100000 --ckpt-dir ck --metrics int.jsonl
  fault_at_step3 $sig $target
  finish 20
  if [ "$target" = launcher ] && [ "$rc" -eq 0 ] && [ -z "$(codes | tr -d ' 0')" ]; then
    # MPICH 4.0.2's hydra, after forwarding a signal, lists 0 for ranks
    # that exited 128+signal (seen under strace), and once in a few SIGINT
    # runs for all of them, and then returns 0 (docs/reliability.md)
    echo "note: hydra reported every rank as 0 and returned 0 (its known misreport)"
  else
    [ "$rc" -eq $code ] || bad "launcher exit status $rc, not $code"
    all_codes $code
  fi
  expect "stopped by $name after step [0-9]+ \(exit status $code\); checkpoint written: resume with --resume ck/step_[0-9]+\.nc"
  no_leftovers
  ls ck
  n=$(ls ck | wc -l)
  [ "$n" -eq 1 ] || bad "$n files in ck/, expected the stop's checkpoint alone"
  stopped=$(sed -n 's/.*stopped by [A-Z]* after step \([0-9]*\).*/\1/p' run.log)
  [ "$(ckpt_step "$(last_ckpt)")" = "$stopped" ] || bad "the checkpoint is not of the stop's step $stopped"
  if [ "$case_" = sigterm_one_rank ]; then resume_check "$(last_ckpt)" $np $mesh
  else resume_check "$(last_ckpt)" $np $mesh compare; fi
  ;;
ckpt_enospc | ckpt_erofs)
  [ -f "$shim" ] || { echo "no fault shim: skipped"; exit 77; }
  if [ "$case_" = ckpt_enospc ]; then
    runs="0:writing.the.header.of 8192:writing" msg="no space left on device" fault=ENOSPC
  else
    runs="0:cannot.create" msg="Read-only file system" fault=EROFS
  fi
  for r in $runs; do
    rm -rf ck
    MPIOPTS="-disable-auto-cleanup -genv LD_PRELOAD $shim -genv SG_FAULT $fault -genv SG_FAULT_PATH step_000004
             -genv SG_FAULT_BYTES ${r%%:*} -genv ASAN_OPTIONS ${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
    t0=$(now)
    start 2 --mesh h=2 --steps 6 --ckpt-dir ck --ckpt-every 2
    finish 60
    all_codes nonzero
    expect "error: .*${r#*:} ck/step_000004\.nc\.tmp: $msg"
    ls ck
    [ "$(ls ck)" = step_000002.nc ] || bad "ck/ holds $(ls ck | tr '\n' ' '), expected step_000002.nc alone"
    resume_check ck/step_000002.nc 2 h=2
  done
  ;;
*)
  echo "unknown case $case_"
  exit 2
  ;;
esac
[ $fail -eq 0 ] && echo "$case_: as expected"
exit $fail

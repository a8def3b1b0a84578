#!/bin/sh
# suite.sh: the tests that run inside the VM, on a pure cgroup v2 kernel,
# as root in the root cgroup. Each check prints "VMTEST <name> PASS|FAIL" on
# the console and on /dev/ttyS1 (the host parses the latter), then
# "VMTEST-SUMMARY passed=N failed=M". A check whose tool is missing FAILS.
#
# /vmtest/config.sh (written by the host) sets TIME_SCALE.
. /vmtest/config.sh

RESULTS=/dev/ttyS1
[ -c "$RESULTS" ] || RESULTS=/dev/null
PY=/usr/bin/python3
BIN=/opt/sandboxd/bin
CG=/sys/fs/cgroup
URL=tcp://127.0.0.1:7878
pass=0
fail=0

result() { # NAME PASS|FAIL [why]
  echo "VMTEST $1 $2${3:+ ($3)}"
  echo "VMTEST $1 $2" >"$RESULTS"
  if [ "$2" = PASS ]; then pass=$((pass + 1)); else fail=$((fail + 1)); fi
}

check() { # NAME COMMAND...: PASS when the command succeeds
  name=$1
  shift
  if "$@"; then result "$name" PASS; else result "$name" FAIL "$*"; fi
}

# Field (dotted path) of the JSON object on stdin, printed as Python's str().
json_field() {
  "$PY" -I -c '
import json, sys
v = json.load(sys.stdin)
for k in sys.argv[1].split("."):
    v = v[k]
print(v)' "$1"
}

section() {
  echo "==== $1 (uptime $(cut -d' ' -f1 /proc/uptime)s)"
}

# ---- the kernel offers what production hosts offer ----
section "cgroup v2 root"
cat $CG/cgroup.controllers
check cgroup2_mounted grep -q ' /sys/fs/cgroup cgroup2 ' /proc/mounts
check cgroup2_has_memory_pids_cpu sh -c "grep -qw memory $CG/cgroup.controllers &&
  grep -qw pids $CG/cgroup.controllers && grep -qw cpu $CG/cgroup.controllers"
check no_cgroup_v1 sh -c "! grep -q ' cgroup ' /proc/mounts"

# The v2 backend asked for by name: on failure its error says why.
section "sandbox-exec --backend cgroup-v2"
check exec_forced_v2 $BIN/sandbox-exec --backend cgroup-v2 --state-dir /tmp/forced-state \
  --uid-base 62500 -- $PY -I -c 'print("forced v2 ok")'

# ---- the engine's own tests, backend chosen by "auto" ----
section "engine_test (auto, time scale $TIME_SCALE)"
if [ -x $BIN/engine_test ]; then
  SANDBOX_TEST_BACKEND=auto SANDBOX_TEST_EXPECT_BACKEND="cgroup v2" \
    SANDBOX_TEST_TIME_SCALE="$TIME_SCALE" CMOCKA_MESSAGE_OUTPUT=TAP \
    $BIN/engine_test >/tmp/engine.tap 2>/tmp/engine.err
  rc=$?
  cat /tmp/engine.err
  cat /tmp/engine.tap
  # One result per cmocka test, from its TAP line.
  sed -n 's/^\(not ok\|ok\) [0-9]* - \([A-Za-z0-9_]*\).*/\1 \2/p' /tmp/engine.tap >/tmp/engine.res
  while read -r a b c; do
    if [ "$a" = ok ]; then result "engine.$b" PASS; else result "engine.$c" FAIL; fi
  done </tmp/engine.res
  planned=$(sed -n 's/^1\.\.\([0-9]*\).*/\1/p' /tmp/engine.tap)
  oks=$(grep -c '^ok ' /tmp/engine.tap)
  # The initramfs carries the standard library only: the matplotlib test is
  # the one skip allowed here (it runs on the host).
  skips=$(grep -c '^not ok [0-9]* # SKIP test_matplotlib_plots_without_setup$' /tmp/engine.tap)
  oks=$((oks + skips))
  check engine_test_exit test "$rc" -eq 0
  check engine_test_all_ran test "${planned:-0}" -gt 30 -a "$oks" = "${planned:-x}"
  check engine_backend_is_v2 grep -q '^# isolation backend: cgroup v2 ' /tmp/engine.err
  check engine_clone_into_cgroup grep -q 'clone_into_cgroup=1' /tmp/engine.err
  check engine_left_no_cgroup sh -c "! ls -d $CG/sandboxd.* 2>/dev/null"
else
  result engine_test FAIL "engine_test was not built"
fi

# ---- sandbox-exec: one run each, figures read from the run's cgroup ----
section "sandbox-exec"
if [ -x $BIN/sandbox-exec ]; then
  EXEC="$BIN/sandbox-exec --json --state-dir /tmp/exec-state --uid-base 62000"
  $EXEC -- $PY -I -c 'print("hi")' >/tmp/exec-hello.json 2>/tmp/exec-hello.err
  cat /tmp/exec-hello.err /tmp/exec-hello.json
  check exec_backend_v2 test "$(json_field backend </tmp/exec-hello.json)" = "cgroup v2"
  check exec_hello test "$(json_field stdout </tmp/exec-hello.json)" = hi
  # 48 MiB written to the sandbox's /tmp (tmpfs, charged to the run's memory
  # cgroup) with a small RSS: only memory.peak counts it, max RSS does not.
  $EXEC --memory-mb 96 -- $PY -I -c '
import os
with open("/tmp/fill", "wb") as f:
    for _ in range(48):
        f.write(b"x" * 2**20)
os.unlink("/tmp/fill")
print("ok")' >/tmp/exec-peak.json 2>/tmp/exec-peak.err
  cat /tmp/exec-peak.err /tmp/exec-peak.json
  peak=$(json_field peak_memory_bytes </tmp/exec-peak.json 2>/dev/null || echo 0)
  check exec_peak_is_memory_peak test "${peak:-0}" -ge $((48 << 20)) -a "${peak:-0}" -le $((96 << 20))
  # The limit is on the tree: two processes of 40 MiB each under 64 MiB.
  $EXEC --memory-mb 64 -- $PY -I -c '
import os, time
pid = os.fork()
b = bytearray(40 * 2**20)
for i in range(0, len(b), 4096): b[i] = 1
time.sleep(2)
print("survived")' >/tmp/exec-tree.json 2>/tmp/exec-tree.err
  cat /tmp/exec-tree.err /tmp/exec-tree.json
  check exec_memory_limit_is_on_the_tree test "$(json_field killed_by </tmp/exec-tree.json)" = memory
  check exec_left_no_cgroup sh -c "! ls -d $CG/sandboxd.* 2>/dev/null"
else
  result exec FAIL "sandbox-exec was not built"
fi

# ---- sandboxd in a delegated subtree that already has a process ----
# systemd's Delegate=yes hands the service a cgroup holding the service's own
# processes; the server must move them into a leaf before it may enable
# controllers for its children (the no-internal-processes rule).
section "sandboxd in a delegated cgroup, end to end on loopback"
if [ -x $BIN/sandboxd ] && [ -x $BIN/sandbox-run ]; then
  D=$CG/delegated
  mkdir $D
  # Controllers the delegating manager (here: us) made available to $D.
  echo "+memory +pids +cpu" >$CG/cgroup.subtree_control
  sleep 600 &
  other=$!
  echo $other >$D/cgroup.procs
  sh -c "echo \$\$ > $D/cgroup.procs && exec $BIN/sandboxd --listen $URL \
    --state-dir /tmp/sandboxd-state --workers 2 --uid-base 63000" \
    >/tmp/sandboxd.log 2>&1 &
  server=$!
  ready=no
  i=0
  while [ $i -lt 300 ]; do
    if grep -q ready /tmp/sandboxd.log; then ready=yes; break; fi
    kill -0 $server 2>/dev/null || break
    sleep 0.2
    i=$((i + 1))
  done
  cat /tmp/sandboxd.log
  check service_ready test $ready = yes
  echo "delegated: procs=[$(cat $D/cgroup.procs)] subtree_control=[$(cat $D/cgroup.subtree_control)]"
  echo "leaf: procs=[$(cat $D/leaf/cgroup.procs 2>/dev/null | tr '\n' ' ')]"
  echo "engine dir: $(ls -d $D/sandboxd.* 2>/dev/null)"
  check delegated_made_leaf grep -qx $other $D/leaf/cgroup.procs
  check delegated_server_in_leaf grep -qx $server $D/leaf/cgroup.procs
  check delegated_no_internal_procs test -z "$(cat $D/cgroup.procs)"
  check delegated_controllers_enabled sh -c "grep -qw memory $D/cgroup.subtree_control &&
    grep -qw pids $D/cgroup.subtree_control"
  check delegated_engine_dir sh -c "grep -qw memory $D/sandboxd.$server/cgroup.subtree_control &&
    grep -qw pids $D/sandboxd.$server/cgroup.subtree_control"

  $BIN/sandbox-run -e $URL --info >/tmp/info.json 2>/tmp/info.err
  cat /tmp/info.err /tmp/info.json
  check service_info_says_v2 test "$(json_field isolation.backend </tmp/info.json)" = "cgroup v2"
  check service_info_cpu_share test "$(json_field isolation.cpu_share_per_slot </tmp/info.json)" = True
  check service_info_cgroup_path test "$(json_field isolation.cgroup_path </tmp/info.json)" = "$D/sandboxd.$server"

  echo 'import sys; print("hello from", sys.version_info[:2])' >/tmp/hello.py
  $BIN/sandbox-run -e $URL /tmp/hello.py >/tmp/hello.out 2>/tmp/hello.err
  rc=$?
  cat /tmp/hello.out /tmp/hello.err
  check service_hello_world sh -c "test $rc -eq 0 && test \"\$(cat /tmp/hello.out)\" = 'hello from (3, 11)'"

  echo 'b = bytearray(256 * 2**20); print("survived")' >/tmp/bomb.py
  $BIN/sandbox-run -e $URL --json --memory-mb 64 /tmp/bomb.py >/tmp/bomb.json 2>/tmp/bomb.err
  cat /tmp/bomb.err /tmp/bomb.json
  check service_memory_killed test "$(json_field killed_by </tmp/bomb.json)" = memory

  printf 'import os\nwhile True:\n    try: os.fork()\n    except OSError: pass\n' >/tmp/forkbomb.py
  $BIN/sandbox-run -e $URL --json --max-processes 16 --timeout-ms "$(awk "BEGIN{print int(2000*$TIME_SCALE)}")" \
    /tmp/forkbomb.py >/tmp/forkbomb.json 2>/tmp/forkbomb.err
  cat /tmp/forkbomb.err /tmp/forkbomb.json
  check service_fork_bomb_timeout test "$(json_field killed_by </tmp/forkbomb.json)" = timeout
  check service_answers_after_fork_bomb sh -c "$BIN/sandbox-run -e $URL /tmp/hello.py | grep -q hello"

  # A session's files count against that session's runs (its memory group),
  # never against another run's memory.
  echo 'open("big", "wb").write(b"x" * (60 << 20)); print("wrote")' >/tmp/files.py
  echo 'b = bytearray(60 << 20); print("allocated")' >/tmp/alloc.py
  $BIN/sandbox-run -e $URL --session mem --disk-mb 128 --memory-mb 256 /tmp/files.py
  groups=$(ls -d $D/sandboxd.$server/group-* 2>/dev/null | wc -l)
  check session_memory_group test "$groups" -eq 1
  $BIN/sandbox-run -e $URL --json /tmp/alloc.py >/tmp/alloc.json 2>&1
  check session_files_not_charged_to_others test "$(json_field killed_by </tmp/alloc.json)" = none
  $BIN/sandbox-run -e $URL --json --session mem --memory-mb 100 /tmp/alloc.py >/tmp/own.json 2>&1
  cat /tmp/own.json
  check session_files_count_for_the_session test "$(json_field killed_by </tmp/own.json)" = memory
  $BIN/sandbox-run -e $URL --json --session mem --memory-mb 64 /tmp/hello.py >/tmp/small.json 2>&1
  check session_run_refused_beside_its_files test "$(json_field status </tmp/small.json)" = FAILED_PRECONDITION
  $BIN/sandbox-run -e $URL --close-session mem
  check session_memory_group_freed test -z "$(ls -d $D/sandboxd.$server/group-* 2>/dev/null)"

  kill -TERM $server
  wait $server
  rc=$?
  tail -n 3 /tmp/sandboxd.log
  check service_stopped_cleanly test $rc -eq 0
  check service_removed_its_cgroup test ! -e $D/sandboxd.$server
  kill $other
else
  result service FAIL "sandboxd or sandbox-run was not built"
fi

# ---- no delegation: a cgroup whose parent enabled no controllers ----
section "sandboxd without a delegated cgroup"
if [ -x $BIN/sandboxd ] && [ -x $BIN/sandbox-run ]; then
  U=$CG/undelegated
  mkdir -p $U/inner
  echo "controllers offered: [$(cat $U/inner/cgroup.controllers)]"
  # Asked for v2 by name, it refuses to start.
  sh -c "echo \$\$ > $U/inner/cgroup.procs && exec $BIN/sandboxd --backend v2 --listen $URL \
    --state-dir /tmp/sandboxd-nodeleg --workers 1 --uid-base 63500" >/tmp/nodeleg.log 2>&1 &
  pid=$!
  i=0
  while kill -0 $pid 2>/dev/null && [ $i -lt 100 ]; do sleep 0.2; i=$((i + 1)); done
  kill $pid 2>/dev/null
  wait $pid
  rc=$?
  cat /tmp/nodeleg.log
  check nodeleg_v2_refuses_to_start sh -c "test $rc -eq 1 && grep -q 'refusing to start' /tmp/nodeleg.log"
  # With the default backend (auto) it refuses too: no cgroup, no start.
  sh -c "echo \$\$ > $U/inner/cgroup.procs && exec $BIN/sandboxd --listen $URL \
    --state-dir /tmp/sandboxd-nodeleg --workers 1 --uid-base 63500" >/tmp/nodeleg-auto.log 2>&1 &
  pid=$!
  i=0
  while kill -0 $pid 2>/dev/null && [ $i -lt 100 ]; do sleep 0.2; i=$((i + 1)); done
  kill $pid 2>/dev/null
  wait $pid
  rc=$?
  cat /tmp/nodeleg-auto.log
  check nodeleg_auto_refuses_to_start sh -c "test $rc -eq 1 && grep -q 'refusing to start' /tmp/nodeleg-auto.log"
  # Only when asked for by name (a development machine) it runs on rlimit, and says so.
  sh -c "echo \$\$ > $U/inner/cgroup.procs && exec $BIN/sandboxd --backend rlimit --listen $URL \
    --state-dir /tmp/sandboxd-nodeleg --workers 1 --uid-base 63500" >/tmp/nodeleg-rl.log 2>&1 &
  pid=$!
  i=0
  while [ $i -lt 150 ] && ! grep -q ready /tmp/nodeleg-rl.log; do
    kill -0 $pid 2>/dev/null || break
    sleep 0.2
    i=$((i + 1))
  done
  $BIN/sandbox-run -e $URL --info >/tmp/nodeleg-info.json 2>/tmp/nodeleg-info.err
  cat /tmp/nodeleg-rl.log /tmp/nodeleg-info.err /tmp/nodeleg-info.json
  b=$(json_field isolation.backend </tmp/nodeleg-info.json)
  mpp=$(json_field isolation.memory_per_process </tmp/nodeleg-info.json)
  check nodeleg_rlimit_by_name_reports_rlimit test "$b/$mpp" = rlimit/True
  kill -TERM $pid
  wait $pid
else
  result nodeleg FAIL "sandboxd or sandbox-run was not built"
fi

# ---- a container: private cgroup namespace, writable cgroupfs ----
# Like `docker run --cgroupns=private` with a writable /sys/fs/cgroup: the
# engine sees itself at "/" of its namespace, but that is not the kernel's
# root cgroup, so the no-internal-processes rule still applies there.
section "sandbox-exec in a private cgroup namespace (container)"
if [ -x $BIN/sandbox-exec ] && [ -x /usr/bin/unshare ]; then
  C=$CG/container
  mkdir $C
  sleep 600 &
  other=$!
  echo $other >$C/cgroup.procs
  sh -c "echo \$\$ > $C/cgroup.procs && exec /usr/bin/unshare --cgroup --mount --propagation private sh -c '
      umount -l /sys/fs/cgroup && mount -t cgroup2 cgroup2 /sys/fs/cgroup &&
      echo \"inside: \$(cat /proc/self/cgroup)\" >&2 &&
      exec $BIN/sandbox-exec --json --state-dir /tmp/ct-state --uid-base 64000 --memory-mb 64 \
        -- $PY -I -c \"b = bytearray(256 * 2**20)\"'" >/tmp/container.json 2>/tmp/container.err
  cat /tmp/container.err /tmp/container.json
  check container_backend_v2 test "$(json_field backend </tmp/container.json)" = "cgroup v2"
  check container_memory_killed test "$(json_field killed_by </tmp/container.json)" = memory
  check container_made_leaf grep -qx $other $C/leaf/cgroup.procs
  check container_left_no_cgroup sh -c "! ls -d $C/sandboxd.* 2>/dev/null"
  kill $other

  # The host's cgroupfs seen from inside a cgroup namespace (not remounted):
  # its root lies above the namespace ("/.." in mountinfo), so the engine's
  # own cgroup cannot be named through it. v2 must refuse, not write
  # elsewhere in the host's tree.
  mkdir $CG/container2
  sh -c "echo \$\$ > $CG/container2/cgroup.procs && exec /usr/bin/unshare --cgroup sh -c '
      grep cgroup2 /proc/self/mountinfo >&2
      exec $BIN/sandbox-exec --backend cgroup-v2 --state-dir /tmp/ct2-state --uid-base 64100 \
        -- $PY -I -c \"print(1)\"'" >/tmp/container2.out 2>/tmp/container2.err
  rc=$?
  cat /tmp/container2.err /tmp/container2.out
  check container_host_cgroupfs_refused sh -c "test $rc -ne 0 && grep -q 'not below the cgroup2 mount' /tmp/container2.err"
  check container_host_cgroupfs_untouched sh -c "! ls -d $CG/sandboxd.* $CG/leaf 2>/dev/null"
else
  result container FAIL "sandbox-exec or unshare missing"
fi

section "summary"
echo "VMTEST-SUMMARY passed=$pass failed=$fail" | tee "$RESULTS"

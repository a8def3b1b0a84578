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

# The processes whose real uid is in [BASE, BASE + N): "pid name" a line.
uid_procs() {
  "$PY" -I -c '
import os, sys
lo, n = int(sys.argv[1]), int(sys.argv[2])
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open(f"/proc/{pid}/status") as f:
            st = dict(l.split(":", 1) for l in f if ":" in l)
    except OSError:
        continue
    if lo <= int(st["Uid"].split()[0]) < lo + n:
        print(pid, st["Name"].strip())' "$1" "$2"
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

# ---- zygote runs, an interpreter session and package code, on v2 ----
# A second server, in a delegated cgroup of its own, with zygotes that
# preload only json (numpy would cost minutes under TCG; what is proven is
# the zygote's path, not its preload), one interpreter slot, and the
# hostile-.pth wheel (tests/lib/hostile_package.py, built by the host) as its
# only package source.
section "sandboxd --zygote: python-zygote runs, an interpreter session, package code"
if [ -x $BIN/sandboxd ] && [ -x $BIN/sandbox-run ]; then
  Z=$CG/zygote-svc
  ZURL=tcp://127.0.0.1:7879
  ZUID=63700
  ZRUN="$BIN/sandbox-run -e $ZURL"
  mkdir $Z
  echo "+memory +pids +cpu" >$CG/cgroup.subtree_control
  sh -c "echo \$\$ > $Z/cgroup.procs && exec $BIN/sandboxd --listen $ZURL \
    --state-dir /tmp/zsvc-state --workers 1 --max-interpreters 1 --uid-base $ZUID \
    --zygote 1 --zygote-preload json --offline 1 --wheelhouse /vmtest/wheels" \
    >/tmp/zsvc.log 2>&1 &
  zserver=$!
  ready=no
  i=0
  while [ $i -lt 300 ]; do
    if grep -q ready /tmp/zsvc.log; then ready=yes; break; fi
    kill -0 $zserver 2>/dev/null || break
    sleep 0.2
    i=$((i + 1))
  done
  check zygote_service_ready test $ready = yes
  E=$Z/sandboxd.$zserver
  # Its uids: slot 0 (the worker; pip runs there too), slot 1 (the
  # interpreter), and one past them, where nothing may run either.
  ZSLOTS=3

  echo 'import sys; print("hello from", sys.version_info[:2])' >/tmp/z-hello.py
  $ZRUN --runtime python-zygote /tmp/z-hello.py >/tmp/z-hello.out 2>/tmp/z-hello.err
  rc=$?
  cat /tmp/z-hello.out /tmp/z-hello.err
  check zygote_hello sh -c "test $rc -eq 0 && test \"\$(cat /tmp/z-hello.out)\" = 'hello from (3, 11)'"
  echo "zygotes: procs=[$(cat $E/zygotes/cgroup.procs 2>/dev/null | tr '\n' ' ')]" \
    "pids.max=$(cat $E/zygotes/pids.max 2>/dev/null) memory.max=$(cat $E/zygotes/memory.max 2>/dev/null)"
  check zygote_in_zygotes_cgroup sh -c "test \"\$(wc -l <$E/zygotes/cgroup.procs)\" -eq 1 &&
    test \"\$(cat $E/zygotes/pids.max)\" != max && test \"\$(cat $E/zygotes/memory.max)\" != max"

  # Who the program is, and its PID 1: a zygote run's must read as a cold run's.
  cat >/tmp/z-ids.py <<'PY'
import os
def status(pid):
    st = dict(l.split(":", 1) for l in open(f"/proc/{pid}/status"))
    return " ".join(st[k].strip() for k in ("Seccomp", "NoNewPrivs", "CapEff", "CapPrm", "CapBnd"))
print("uid", os.getuid(), os.getgid(), os.getgroups(), "self", status("self"), "pid1", status(1))
PY
  $ZRUN --runtime python /tmp/z-ids.py >/tmp/z-ids-cold.out 2>&1
  $ZRUN --runtime python-zygote /tmp/z-ids.py >/tmp/z-ids-zyg.out 2>&1
  echo "cold:   $(cat /tmp/z-ids-cold.out)"
  echo "zygote: $(cat /tmp/z-ids-zyg.out)"
  check zygote_confined_like_cold sh -c "grep -q '^uid [1-9][0-9]* [1-9][0-9]* \[\] self 2 1 0000000000000000 0000000000000000 0000000000000000 pid1 2 1 ' /tmp/z-ids-cold.out &&
    cmp -s /tmp/z-ids-cold.out /tmp/z-ids-zyg.out"

  echo 'b = bytearray(256 * 2**20); print("survived")' >/tmp/z-bomb.py
  $ZRUN --json --runtime python-zygote --memory-mb 64 /tmp/z-bomb.py >/tmp/z-bomb.json 2>&1
  cat /tmp/z-bomb.json
  check zygote_memory_killed test "$(json_field killed_by </tmp/z-bomb.json)" = memory

  # 48 MiB touched under a 128 MiB limit: the run's memory.peak, which
  # counts the run alone (the zygote's pages are charged to its own cgroup).
  echo 'b = b"x" * (48 << 20); print(len(b))' >/tmp/z-peak.py
  $ZRUN --json --runtime python-zygote --memory-mb 128 /tmp/z-peak.py >/tmp/z-peak.json 2>&1
  cat /tmp/z-peak.json
  peak=$(json_field peak_memory_bytes </tmp/z-peak.json 2>/dev/null || echo 0)
  check zygote_peak_memory test "${peak:-0}" -ge $((48 << 20)) -a "${peak:-0}" -le $((128 << 20))

  printf 'import os\nwhile True:\n    try: os.fork()\n    except OSError: pass\n' >/tmp/z-forkbomb.py
  $ZRUN --json --runtime python-zygote --max-processes 16 \
    --timeout-ms "$(awk "BEGIN{print int(2000*$TIME_SCALE)}")" \
    /tmp/z-forkbomb.py >/tmp/z-forkbomb.json 2>&1
  cat /tmp/z-forkbomb.json
  check zygote_fork_bomb_timeout test "$(json_field killed_by </tmp/z-forkbomb.json)" = timeout
  # The answer comes once the tree is dead and the run's cgroup removed:
  # of the server's uids only the zygote is left, and it is the zygote.
  uid_procs $ZUID $ZSLOTS >/tmp/z-procs.txt
  echo "processes of the server's uids: $(tr '\n' ' ' </tmp/z-procs.txt)"
  check zygote_left_no_process sh -c "test \"\$(wc -l </tmp/z-procs.txt)\" -eq 1 &&
    grep -qx \"\$(cut -d' ' -f1 /tmp/z-procs.txt)\" $E/zygotes/cgroup.procs"
  check zygote_left_no_run_cgroup sh -c "! ls -d $E/slot-* 2>/dev/null"
  $ZRUN --runtime python-zygote /tmp/z-hello.py >/tmp/z-after.out 2>&1
  check zygote_answers_after_bombs grep -qx 'hello from (3, 11)' /tmp/z-after.out

  # An interpreter session (started cold, in its own slot and memory group).
  echo 'x = 41' | $ZRUN --json --session nb --session-mode interpreter --memory-mb 96 - >/tmp/i1.json 2>&1
  echo 'x + 1' | $ZRUN --json --session nb - >/tmp/i2.json 2>&1
  cat /tmp/i1.json /tmp/i2.json
  check interp_state_kept test "$(json_field result </tmp/i2.json)/$(json_field state_lost </tmp/i2.json)" = 42/False
  check interp_in_memory_group sh -c "ls -d $E/group-*/run"
  echo 'b = b"x" * (256 << 20)' | $ZRUN --json --session nb - >/tmp/i3.json 2>&1
  echo 'print("x" in dir())' | $ZRUN --json --session nb --memory-mb 96 - >/tmp/i4.json 2>&1
  cat /tmp/i3.json /tmp/i4.json
  check interp_oom_killed_by_memory test "$(json_field killed_by </tmp/i3.json)/$(json_field interpreter_ended </tmp/i3.json)" = memory/True
  # The cap in force is the first call's 96 MiB, not this call's default.
  json_field feedback </tmp/i3.json >/tmp/i3.feedback 2>&1
  check interp_oom_feedback_names_the_cap grep -q 'memory limit of 96 MiB reached' /tmp/i3.feedback
  check interp_state_lost_after_oom test "$(json_field state_lost </tmp/i4.json)/$(json_field stdout </tmp/i4.json)" = True/False
  # A cell's child over the cap: on v2 memory.oom.group takes the whole
  # group, the interpreter with it (v1 kills the child alone).
  printf 'import os\nkid = os.fork()\nif kid == 0:\n    h = b"x" * (256 << 20)\n    os._exit(0)\nos.waitpid(kid, 0)\n' |
    $ZRUN --json --session nb - >/tmp/i5.json 2>&1
  cat /tmp/i5.json
  check interp_child_oom_ends_interpreter test "$(json_field killed_by </tmp/i5.json)/$(json_field interpreter_ended </tmp/i5.json)" = memory/True
  $ZRUN --close-session nb
  check interp_group_freed test -z "$(ls -d $E/group-* 2>/dev/null)"

  # Package code: the hostile .pth runs in the environment's zygote at its
  # start; it must have been confined there as a run, and its daemon gone.
  $ZRUN --json --runtime python-zygote --requirement sbx-hook==1.0 \
    /vmtest/hook_report.py >/tmp/z-hook.json 2>&1
  cat /tmp/z-hook.json
  "$PY" -I - /tmp/z-hook.json >/tmp/z-hook.res <<'PY'
import json, re, sys
sys.path.insert(0, "/vmtest/lib")
import hostile_package as hp
try:
    seen = json.loads(json.load(open(sys.argv[1]))["stdout"])
except (ValueError, KeyError, TypeError):
    seen = {}
print("seen:", seen, file=sys.stderr)
items = hp.confined(seen)
for what, ok in items:
    print("zygote_hook." + re.sub("[^a-z0-9]+", "_", what.lower()).strip("_")[:48], "PASS" if ok else "FAIL")
print("zygote_hook_all_confined", "PASS" if seen and all(ok for _, ok in items) else "FAIL")
print("zygote_hook_ran_in_zygote",
      "PASS" if seen.get("pid") not in (None, seen.get("my_pid")) else "FAIL")
print("zygote_hook_daemon_gone", "PASS" if seen and seen.get("daemon_answers") == "" else "FAIL")
PY
  while read -r n v; do result "$n" "$v"; done </tmp/z-hook.res
  check zygote_hook_no_sbxhookd sh -c "! grep -qx sbxhookd /proc/[0-9]*/comm 2>/dev/null"

  kill -TERM $zserver
  wait $zserver
  rc=$?
  tail -n 3 /tmp/zsvc.log
  check zygote_service_stopped_cleanly test $rc -eq 0
  check zygote_service_removed_its_cgroup test ! -e $E
  check zygote_service_left_no_process test -z "$(uid_procs $ZUID $ZSLOTS)"
else
  result zygote FAIL "sandboxd or sandbox-run was not built"
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

#!/usr/bin/env bash
# Where a call's extra CPU goes: samples all CPUs with perf (cpu-clock,
# which works without hardware counters, as on a VM) while N hello-world
# calls go through a fresh sandboxd at concurrency 2 x CPUs, then while N
# bare interpreters run at the same concurrency, and prints the CPU per call
# of each process name side by side (sandboxd includes the sandbox child
# before its exec; memfd:sandbox-init is PID 1; swapper is idle time).
# Then charges each idle period during the service run to the kernel stack
# of the task that went to sleep just before it (bench/idle_by_stack.py).
# Needs root and perf (Debian: linux-perf).
#   bench/profile-overhead.sh [N] [BIN_DIR]
set -euo pipefail
n=${1:-300}
bin=${2:-build/bin}
cd "$(dirname "$0")/.."
command -v perf >/dev/null || { echo "profile-overhead: perf missing (apt-get install linux-perf)" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "profile-overhead: needs root (sandboxd)" >&2; exit 1; }
tmp=$(mktemp -d)
port=$((20000 + RANDOM % 20000))
url=tcp://127.0.0.1:$port
"$bin/sandboxd" --listen "$url" --state-dir "$tmp/state" >"$tmp/sandboxd.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 100); do "$bin/sandbox-run" -e "$url" --health >/dev/null 2>&1 && break; sleep 0.05; done
conc=$((2 * $(nproc)))
"$bin/sandbox-bench" -e "$url" --concurrency "$conc" --requests 40 bench/hello.py >/dev/null
freq=999
perf record -q -o "$tmp/svc.data" -e cpu-clock -F $freq -a -g -- \
  "$bin/sandbox-bench" -e "$url" --concurrency "$conc" --requests "$n" bench/hello.py >/dev/null 2>&1
perf record -q -o "$tmp/bare.data" -e cpu-clock -F $freq -a -g -- \
  bash -c "seq $n | xargs -P$conc -I{} /usr/bin/python3 -I bench/hello.py >/dev/null" 2>/dev/null
per_comm() {
  perf report -i "$1" --no-children --sort comm -g none --stdio -F overhead,sample,comm 2>/dev/null |
    awk -v n="$n" -v f="$freq" '/^ +[0-9.]+%/ { printf "%s %.3f\n", $3, $2 / f / n * 1000 }'
}
per_comm "$tmp/svc.data" >"$tmp/svc.txt"
per_comm "$tmp/bare.data" >"$tmp/bare.txt"
echo "CPU per call in ms, by process name ($n calls, concurrency $conc, perf cpu-clock at $freq Hz;"
echo "the two runs follow each other, so compare the rows the service adds, not python3; ratios: bench/ratio.py):"
printf '  %-20s %10s %10s\n' "process" "service" "bare"
join -a1 -a2 -e 0 -o 0,1.2,2.2 <(sort "$tmp/svc.txt") <(sort "$tmp/bare.txt") |
  awk "{ print \$0, \$2 + \$3 }" | sort -k4 -nr | head -12 | awk '{ printf "  %-20s %10.3f %10.3f\n", $1, $2, $3 }'
awk '{ s += $2 } END { printf "  %-20s %10.3f", "total", s }' "$tmp/svc.txt"
awk '{ s += $2 } END { printf " %10.3f\n", s }' "$tmp/bare.txt"
echo
echo "Idle CPU during $n service calls, by the stack of the task that slept first:"
perf record -q -o "$tmp/sched.data" -e sched:sched_switch -a -g -- \
  "$bin/sandbox-bench" -e "$url" --concurrency "$conc" --requests "$n" bench/hello.py >/dev/null 2>&1
perf script -i "$tmp/sched.data" -F comm,pid,tid,cpu,time,event,trace,ip,sym 2>/dev/null |
  /usr/bin/python3 bench/idle_by_stack.py --calls "$n"

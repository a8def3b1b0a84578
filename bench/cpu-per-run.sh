#!/usr/bin/env bash
# CPU cost per run, system-wide: busy and idle CPU time from /proc/stat
# across N runs of a command, divided by N. Unlike wall time it shows where a
# throughput gap comes from: more work per run (busy) or CPUs left waiting
# (idle). Steal time is left out.
#
#   bench/cpu-per-run.sh 300 -- build/bin/sandbox-bench -e URL --concurrency 4 --requests 300 hello.py
#   bench/cpu-per-run.sh 300 -- bash -c 'seq 300 | xargs -P4 -I{} /usr/bin/python3 -I hello.py'
set -euo pipefail
if [ $# -lt 3 ] || [ "$2" != "--" ]; then
  echo "usage: $0 N -- COMMAND [ARG]..." >&2
  exit 2
fi
n=$1
shift 2
hz=$(getconf CLK_TCK)
read -r _ u1 ni1 s1 id1 io1 irq1 sirq1 _ < /proc/stat
t0=$(date +%s%N)
"$@" >/dev/null
t1=$(date +%s%N)
read -r _ u2 ni2 s2 id2 io2 irq2 sirq2 _ < /proc/stat
busy=$(( (u2 + ni2 + s2 + irq2 + sirq2) - (u1 + ni1 + s1 + irq1 + sirq1) ))
idle=$(( (id2 + io2) - (id1 + io1) ))
awk -v b="$busy" -v i="$idle" -v n="$n" -v hz="$hz" -v w="$((t1 - t0))" 'BEGIN {
  printf "wall %.2f s; per run: busy %.2f ms CPU, idle %.2f ms CPU\n", w / 1e9, b * 1000 / hz / n, i * 1000 / hz / n }'

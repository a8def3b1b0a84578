#!/usr/bin/python3
"""Reads `perf script` output of sched:sched_switch events recorded with -a -g
(fields comm,pid,tid,cpu,time,event,trace,ip,sym) and charges each idle
period of a CPU (from a switch to the idle task to the next switch away from
it) to the task that went off that CPU into idle, keyed by its kernel stack.
Prints the total idle CPU time and the largest causes, per call when --calls
is given. Used by bench/profile-overhead.sh."""
import argparse
import collections
import re
import sys

EVENT = re.compile(r"^\S.*?\s+\d+/\d+\s+\[(\d+)\]\s+([\d.]+): sched:sched_switch: "
                   r"prev_comm=(.*?) prev_pid=(\d+) .*? ==> next_comm=.*? next_pid=(\d+)")
SKIP = ("__schedule", "schedule", "[unknown]")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--calls", type=int, default=0)
    ap.add_argument("--top", type=int, default=8)
    a = ap.parse_args()
    events, cur = [], None
    for line in sys.stdin:
        m = EVENT.match(line)
        if m:
            cur = {"cpu": int(m.group(1)), "t": float(m.group(2)), "prev": m.group(3),
                   "prev_pid": int(m.group(4)), "next_pid": int(m.group(5)), "stack": []}
            events.append(cur)
        elif cur is not None and line.strip():
            parts = line.split(None, 1)
            if len(parts) == 2:
                cur["stack"].append(parts[1].strip().split("+")[0])
    if not events:
        sys.exit("idle_by_stack: no sched_switch events on stdin")
    idle_from, by_cause, count, total = {}, collections.Counter(), collections.Counter(), 0.0
    for e in events:
        if e["next_pid"] == 0:
            idle_from[e["cpu"]] = e
        elif e["prev_pid"] == 0 and e["cpu"] in idle_from:
            s = idle_from.pop(e["cpu"])
            d = e["t"] - s["t"]
            total += d
            frames = [f for f in s["stack"] if not f.startswith(SKIP)][:4]
            key = f"{s['prev'].split('/')[0][:16]:16s} {' < '.join(frames)}"
            by_cause[key] += d
            count[key] += 1
    span = events[-1]["t"] - events[0]["t"]
    per = f", {total * 1000 / a.calls:.2f} ms per call" if a.calls else ""
    print(f"  window {span:.2f} s, idle {total:.2f} CPU-s{per}")
    for key, d in by_cause.most_common(a.top):
        share = f"{d * 1000 / a.calls:7.3f} ms/call" if a.calls else f"{d * 1000:9.1f} ms"
        print(f"  {share} {count[key]:6d}x  {key[:150]}")


if __name__ == "__main__":
    main()

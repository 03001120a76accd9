#!/usr/bin/env python3
"""sched_gaps: where a thread's milliseconds went, from a perf scheduler trace.

Reads `perf script` output of sched:sched_switch events (plus any other events; every event
proves its CPU was running something) and prints:

  - the longest stretches the named thread was off CPU, with how it left (R: preempted,
    S: asleep) and what held its CPU meanwhile;
  - the longest silences per CPU: stretches with no event at all, which on a busy CPU mean
    the vCPU itself was not running (the hypervisor had it) or a task ran undisturbed.

Per-task CPU time is left to /proc/<pid>/schedstat: on this VM the switch events of an
unpinned-to-idle CPU did not add up to it (the idle task was charged time the load
generator's schedstat counted), while the herald CPU's did. Check `perf report --stats` for
LOST events before trusting a silence.

Record during a load (both CPUs, 3 s), then analyse:

  perf record -o /tmp/s.perf -a -e sched:sched_switch -e sched:sched_wakeup \\
      -e irq:softirq_entry -e irq_vectors:local_timer_entry -- sleep 3
  perf script -i /tmp/s.perf -F comm,cpu,time,event,trace | bench/sched_gaps.py herald-io0

Usage: sched_gaps.py THREAD_NAME [--top N] [--min-ms MS]
"""
import argparse
import re
import sys

SWITCH = re.compile(r"prev_comm=(.*?) prev_pid=\d+ .*?prev_state=(\S+) ==> next_comm=(.*?) next_pid")


def main():
    ap = argparse.ArgumentParser(description="off-CPU gaps of one thread in a perf sched trace")
    ap.add_argument("thread", help="the thread's comm, e.g. herald-io0")
    ap.add_argument("--top", type=int, default=10, help="rows per list (10)")
    ap.add_argument("--min-ms", type=float, default=2.0, help="shortest silence listed (2 ms)")
    args = ap.parse_args()

    running = {}  # cpu -> (since, comm)
    left = None  # (time, cpu, prev_state) when the thread last left a CPU
    gaps = []  # (seconds, start, state, {comm: seconds on the thread's CPU meanwhile})
    held = {}  # comm -> seconds on the thread's last CPU since it left
    last_event = {}  # cpu -> time
    silences = []  # (seconds, cpu, start)
    first = last = None

    for line in sys.stdin:
        m = re.match(r"\s*(.*?)\s+\[(\d+)\]\s+([\d.]+):", line)
        if not m:
            continue
        cpu, t = int(m.group(2)), float(m.group(3))
        first = t if first is None else first
        last = t
        if cpu in last_event and t - last_event[cpu] >= args.min_ms / 1e3:
            silences.append((t - last_event[cpu], cpu, last_event[cpu]))
        last_event[cpu] = t
        sw = SWITCH.search(line)
        if not sw:
            continue
        prev, state, nxt = sw.groups()
        if cpu in running:
            since, comm = running[cpu]
            if left is not None and cpu == left[1] and comm != args.thread:
                held[comm] = held.get(comm, 0.0) + t - since
        running[cpu] = (t, nxt)
        if prev == args.thread:
            left = (t, cpu, state)
            held = {}
        if nxt == args.thread and left is not None:
            gaps.append((t - left[0], left[0], left[2], held))
            left = None

    if first is None:
        sys.exit("sched_gaps: no events on stdin (see --help for the perf commands)")
    span = last - first
    print(f"trace: {span:.3f} s")
    print(f"\n{args.thread}: longest stretches off CPU")
    for secs, start, state, who in sorted(gaps, reverse=True)[: args.top]:
        top = ", ".join(f"{c} {s * 1e3:.1f}" for c, s in sorted(who.items(), key=lambda kv: -kv[1])[:3])
        print(f"  {secs * 1e3:7.2f} ms from {start:.4f} ({state}); its CPU ran: {top or 'nothing traced'}")
    off = sum(g[0] for g in gaps if g[0] >= args.min_ms / 1e3)
    print(f"  total in stretches >= {args.min_ms} ms: {off * 1e3:.1f} ms")
    print(f"\nCPU silences >= {args.min_ms} ms (no event at all)")
    for secs, cpu, start in sorted(silences, reverse=True)[: args.top]:
        print(f"  cpu{cpu} {secs * 1e3:7.2f} ms from {start:.4f}")


if __name__ == "__main__":
    main()

/*
 * c2c: how long a cache line takes to go from one CPU to another and back, on this machine,
 * now. On the project's 2-vCPU VM the figure moves between runs (about 500 ns round trip at
 * times, far less at others: where the host places the two vCPUs), and every lock-free hand-off
 * pays it, so the pool and pingpong benchmarks print it beside their tables.
 */
#ifndef HERALD_BENCH_C2C_H
#define HERALD_BENCH_C2C_H

#include <stddef.h>

/* Median round trip in ns of a flag bounced between threads pinned to cpu_a and cpu_b, over 5
 * batches of trips / 5 round trips; 20,000 trips take 2-10 ms, and a batch stops after 40 ms
 * (one thread descheduled). Returns -1 when the threads cannot be pinned. */
double c2c_round_trip_ns(int cpu_a, int cpu_b, int trips);

/* The fewest and most of several probes, e.g. one per round of a benchmark cell. */
typedef struct c2c_range_s {
    double min_ns;
    double max_ns;
} c2c_range_t;

/* Probes (trips as above) and widens *range, which starts as {0, 0} (no probe succeeded). */
void c2c_probe_into(c2c_range_t *range, int cpu_a, int cpu_b, int trips);

/* Widens *range to cover *other too. */
void c2c_range_merge(c2c_range_t *range, const c2c_range_t *other);

/* "min-max" in ns ("min" when equal), or "n/a" when no probe succeeded; returns buf. */
const char *c2c_range_str(const c2c_range_t *range, char *buf, size_t size);

#endif

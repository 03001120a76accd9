/* c2c: see c2c.h. */
#include "c2c.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "netlib/nl_common.h"

enum { C2C_BATCHES = 5 };
#define C2C_BATCH_LIMIT_NS 40000000u /* a batch ends early past 40 ms (a descheduled thread) */

typedef struct c2c_s {
    _Atomic uint64_t ball; /* odd: on its way to the responder; even: back at the initiator */
    _Atomic bool is_stopping;
    _Atomic int responder_pinned; /* 1 pinned, -1 could not pin, 0 not yet */
    int cpu_initiator;
    int cpu_responder;
    int batch_trips;
    double result_ns;
} c2c_t;

static bool pin_self(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

static void *c2c_responder(void *arg)
{
    c2c_t *c = arg;
    atomic_store(&c->responder_pinned, pin_self(c->cpu_responder) ? 1 : -1);
    while (!atomic_load_explicit(&c->is_stopping, memory_order_relaxed)) {
        uint64_t v = atomic_load_explicit(&c->ball, memory_order_acquire);
        if (v & 1)
            atomic_store_explicit(&c->ball, v + 1, memory_order_release);
    }
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a;
    double y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Waits until the serve of value `served` (0: none yet) is answered; false once past the
 * deadline. The clock is read only every 4096 polls, to keep it out of the figure. */
static bool await_answer(c2c_t *c, uint64_t served, uint64_t deadline_ns)
{
    if (served == 0)
        return true;
    for (unsigned spins = 1; atomic_load_explicit(&c->ball, memory_order_acquire) == served;
         spins++)
        if ((spins & 4095) == 0 && nl_now_ns() > deadline_ns)
            return false;
    return true;
}

/* Runs on a thread of its own, so the caller's affinity stays as it was. */
static void *c2c_initiator(void *arg)
{
    c2c_t *c = arg;
    if (!pin_self(c->cpu_initiator))
        return NULL;
    while (atomic_load(&c->responder_pinned) == 0)
        sched_yield();
    if (atomic_load(&c->responder_pinned) < 0)
        return NULL;
    double per_trip[C2C_BATCHES];
    uint64_t served = 0; /* the last odd value served; the responder answers it with +1 */
    for (int b = 0; b < C2C_BATCHES; b++) {
        uint64_t start_ns = nl_now_ns();
        uint64_t deadline_ns = start_ns + C2C_BATCH_LIMIT_NS;
        int trips = 0;
        /* A trip starts once the last serve is answered: a batch that ran out of time may
         * have left it unanswered, and serving on top of it would never be answered. */
        while (trips < c->batch_trips && await_answer(c, served, deadline_ns)) {
            served = atomic_load_explicit(&c->ball, memory_order_relaxed) + 1;
            atomic_store_explicit(&c->ball, served, memory_order_release);
            trips++;
            if ((trips & 63) == 0 && nl_now_ns() > deadline_ns)
                break;
        }
        if (!await_answer(c, served, deadline_ns))
            trips = trips > 1 ? trips - 1 : 0; /* the last serve is still out */
        per_trip[b] = trips ? (double)(nl_now_ns() - start_ns) / trips : (double)C2C_BATCH_LIMIT_NS;
    }
    qsort(per_trip, C2C_BATCHES, sizeof(per_trip[0]), cmp_double);
    c->result_ns = per_trip[C2C_BATCHES / 2];
    return NULL;
}

double c2c_round_trip_ns(int cpu_a, int cpu_b, int trips)
{
    c2c_t c = {.cpu_initiator = cpu_a,
               .cpu_responder = cpu_b,
               .batch_trips = trips / C2C_BATCHES > 0 ? trips / C2C_BATCHES : 1,
               .result_ns = -1};
    pthread_t responder;
    pthread_t initiator;
    if (pthread_create(&responder, NULL, c2c_responder, &c) != 0)
        return -1;
    if (pthread_create(&initiator, NULL, c2c_initiator, &c) == 0)
        pthread_join(initiator, NULL);
    atomic_store(&c.is_stopping, true);
    pthread_join(responder, NULL);
    return c.result_ns;
}

void c2c_range_merge(c2c_range_t *range, const c2c_range_t *other)
{
    if (other->min_ns == 0)
        return;
    if (range->min_ns == 0 || other->min_ns < range->min_ns)
        range->min_ns = other->min_ns;
    if (other->max_ns > range->max_ns)
        range->max_ns = other->max_ns;
}

void c2c_probe_into(c2c_range_t *range, int cpu_a, int cpu_b, int trips)
{
    double ns = c2c_round_trip_ns(cpu_a, cpu_b, trips);
    if (ns > 0)
        c2c_range_merge(range, &(c2c_range_t){ns, ns});
}

const char *c2c_range_str(const c2c_range_t *range, char *buf, size_t size)
{
    if (range->min_ns == 0)
        snprintf(buf, size, "n/a");
    else if (range->min_ns == range->max_ns)
        snprintf(buf, size, "%.0f", range->min_ns);
    else
        snprintf(buf, size, "%.0f-%.0f", range->min_ns, range->max_ns);
    return buf;
}

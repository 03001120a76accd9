/*
 * lg_stats: per-thread counters and reason tables, and their sum (see lg_stats.h).
 */
#include "lg_stats.h"

#include <string.h>

void lg_stats_init(lg_stats_t *st)
{
    /* A zero-filled block is valid: null names, zero counts, empty histograms. */
    memset(st, 0, sizeof(*st));
}

void lg_reasons_add(lg_reasons_t *r, const char *name)
{
    /* The writer is alone, so its own relaxed loads see its earlier stores. A new name's count
     * is stored before the name is published with release, so a reader that acquires the name
     * sees at least that count. The last slot is reserved for "other". */
    for (size_t i = 0; i < LG_REASON_SLOTS; i++) {
        const char *cur = atomic_load_explicit(&r->names[i], memory_order_relaxed);
        if (cur == NULL) {
            if (i == LG_REASON_SLOTS - 1)
                name = "other";
            atomic_store_explicit(&r->counts[i], 1, memory_order_relaxed);
            atomic_store_explicit(&r->names[i], name, memory_order_release);
            return;
        }
        if (cur == name || strcmp(cur, name) == 0 || i == LG_REASON_SLOTS - 1) {
            lg_stats_add(&r->counts[i], 1);
            return;
        }
    }
}

static void reason_list_add(lg_reason_list_t *l, const char *name, uint64_t count)
{
    for (size_t i = 0; i < l->len; i++) {
        if (strcmp(l->names[i], name) == 0) {
            l->counts[i] += count;
            return;
        }
    }
    if (l->len == LG_REASON_SLOTS) {
        /* Merged tables may hold more names than one; the overflow joins the last entry. */
        l->names[LG_REASON_SLOTS - 1] = "other";
        l->counts[LG_REASON_SLOTS - 1] += count;
        return;
    }
    l->names[l->len] = name;
    l->counts[l->len] = count;
    l->len++;
}

static void reasons_merge(lg_reason_list_t *l, lg_reasons_t *r)
{
    for (size_t i = 0; i < LG_REASON_SLOTS; i++) {
        const char *name = atomic_load_explicit(&r->names[i], memory_order_acquire);
        if (name == NULL)
            break;
        reason_list_add(l, name, atomic_load_explicit(&r->counts[i], memory_order_relaxed));
    }
}

void lg_stats_sum(lg_totals_t *out, lg_stats_t *const *stats, size_t n)
{
    memset(out, 0, sizeof(*out));
    for (size_t i = 0; i < n; i++) {
        lg_stats_t *s = stats[i];
#define LG_STATS_SUM(name) out->name += lg_stats_get(&s->name);
        LG_STATS_FIELDS(LG_STATS_SUM)
#undef LG_STATS_SUM
        reasons_merge(&out->connect_reasons, &s->connect_reasons);
        reasons_merge(&out->disconnect_reasons, &s->disconnect_reasons);
        reasons_merge(&out->error_reasons, &s->error_reasons);
        nl_hist_merge(&out->latency_ns, &s->latency_ns);
        nl_hist_merge(&out->latency_arrival_ns, &s->latency_arrival_ns);
        nl_hist_merge(&out->connect_ns, &s->connect_ns);
    }
}

uint64_t lg_reason_list_total(const lg_reason_list_t *l)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < l->len; i++)
        sum += l->counts[i];
    return sum;
}

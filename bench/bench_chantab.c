/*
 * bench_chantab: gw_chantab lookups in a table of n personal channels ("lg:u:<i>", one heap
 * object each, as herald holds them), random hits and random misses, in ns per lookup
 * (including formatting the name and hashing it, about 50 ns here). With many channels the
 * keys outgrow the cache, and the figure is mostly cache misses: one per probe that reads a
 * key.
 *
 * Usage: bench_chantab [N (1000000)] [LOOKUPS (2000000)]
 * A benchmark program that prints figures, never a ctest case (STYLE.md §9).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gw_channel.h"

typedef struct obj_s {
    gw_chankey_t key;
    char name[24];
} obj_t;

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* Looks up q random names, present ones ("lg:u:<i>") or absent ones ("lg:x:<i>"); returns the
 * ns per lookup and counts in *found those found. */
static double lookups(const gw_chantab_t *t, bool is_present, int n, int q, unsigned *rng,
                      long *found)
{
    double t0 = now_ns();
    for (int k = 0; k < q; k++) {
        *rng = *rng * 1103515245u + 12345u;
        int i = (int)((*rng >> 8) % (unsigned)n);
        char name[24];
        int len = snprintf(name, sizeof(name), is_present ? "lg:u:%d" : "lg:x:%d", i);
        *found += gw_chantab_find(t, name, (size_t)len, gw_chantab_hash(name, (size_t)len)) != NULL;
    }
    return (now_ns() - t0) / q;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 1000000;
    int q = argc > 2 ? atoi(argv[2]) : 2000000;
    if (n < 1 || q < 1) {
        fprintf(stderr, "usage: bench_chantab [N] [LOOKUPS]\n");
        return 2;
    }
    gw_chantab_t t;
    obj_t **objs = malloc(sizeof(*objs) * (size_t)n);
    if (!objs || gw_chantab_init(&t) < 0)
        return 1;
    for (int i = 0; i < n; i++) {
        /* A little more than the object, so neighbours do not share cache lines. */
        objs[i] = calloc(1, sizeof(obj_t) + 64);
        if (!objs[i])
            return 1;
        int len = snprintf(objs[i]->name, sizeof(objs[i]->name), "lg:u:%d", i);
        objs[i]->key.name_len = (uint16_t)len;
        objs[i]->key.hash = gw_chantab_hash(objs[i]->name, (size_t)len);
        if (gw_chantab_insert(&t, &objs[i]->key) < 0)
            return 1;
    }
    unsigned rng = 12345;
    long hits = 0;
    long misses = 0;
    double hit_ns = lookups(&t, true, n, q, &rng, &hits);
    double miss_ns = lookups(&t, false, n, q, &rng, &misses);
    printf("bench_chantab: %d channels, %u slots (load %.2f): hit %.0f ns (%ld of %d found), "
           "miss %.0f ns (%ld of %d found)\n",
           n, t.mask + 1, (double)n / (t.mask + 1), hit_ns, hits, q, miss_ns, misses, q);
    for (int i = 0; i < n; i++) {
        gw_chantab_remove(&t, &objs[i]->key);
        free(objs[i]);
    }
    gw_chantab_deinit(&t);
    free(objs);
    return hits == q && misses == 0 ? 0 : 1;
}

/*
 * gw_hashring: points on a 64-bit circle, binary-searched. See gw_hashring.h.
 *
 * FNV-1a alone spreads short, similar strings ("10.0.0.1:6379#0", "#1", ...) poorly over the
 * high bits, so every hash goes through splitmix64's finaliser; the ring test checks the
 * spread (each of 3 servers gets 25-42% of 30,000 channels).
 */
#include "gw_hashring.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t gw_hashring_hash(const char *data, size_t len)
{
    uint64_t h = UINT64_C(14695981039346656037);
    for (size_t i = 0; i < len; i++) {
        h ^= (uint8_t)data[i];
        h *= UINT64_C(1099511628211);
    }
    h ^= h >> 30;
    h *= UINT64_C(0xbf58476d1ce4e5b9);
    h ^= h >> 27;
    h *= UINT64_C(0x94d049bb133111eb);
    h ^= h >> 31;
    return h;
}

static int point_cmp(const void *a, const void *b)
{
    const gw_hashring_point_t *x = a;
    const gw_hashring_point_t *y = b;
    if (x->hash != y->hash)
        return x->hash < y->hash ? -1 : 1;
    /* Two servers on one point (a 2^-64 chance): the lower index wins, on every node. */
    return x->server < y->server ? -1 : x->server > y->server;
}

int gw_hashring_init(gw_hashring_t *r, const char *const *names, uint32_t n)
{
    memset(r, 0, sizeof(*r));
    if (n == 0)
        return -EINVAL;
    r->points = calloc((size_t)n * GW_HASHRING_POINTS, sizeof(*r->points));
    if (!r->points)
        return -ENOMEM;
    for (uint32_t s = 0; s < n; s++) {
        for (uint32_t i = 0; i < GW_HASHRING_POINTS; i++) {
            char buf[320];
            int len = snprintf(buf, sizeof(buf), "%s#%u", names[s], i);
            gw_hashring_point_t *p = &r->points[r->n_points++];
            p->hash = gw_hashring_hash(buf, (size_t)len < sizeof(buf) ? (size_t)len : sizeof(buf));
            p->server = s;
        }
    }
    qsort(r->points, r->n_points, sizeof(*r->points), point_cmp);
    r->n_servers = n;
    return 0;
}

void gw_hashring_deinit(gw_hashring_t *r)
{
    free(r->points);
    memset(r, 0, sizeof(*r));
}

uint32_t gw_hashring_lookup(const gw_hashring_t *r, const char *key, size_t len)
{
    if (r->n_servers <= 1)
        return 0;
    uint64_t h = gw_hashring_hash(key, len);
    size_t lo = 0;
    size_t hi = r->n_points; /* the first point with hash >= h is in [lo, hi] */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (r->points[mid].hash < h)
            lo = mid + 1;
        else
            hi = mid;
    }
    return r->points[lo == r->n_points ? 0 : lo].server;
}

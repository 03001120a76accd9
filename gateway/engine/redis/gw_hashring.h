/*
 * gw_hashring: consistent hashing of channel names over a few Redis servers, so channels
 * spread over them and adding or removing a server moves only its share (about 1/n) of the
 * channels, not nearly all of them as `hash % n` would.
 *
 * Each server puts GW_HASHRING_POINTS points on a 64-bit circle (the hash of "address#i"); a
 * channel belongs to the server of the first point at or after the channel's own hash,
 * wrapping round. Every node computes the same ring from the same list of addresses, whatever
 * order they are listed in, so all nodes agree where a channel lives.
 *
 * Thread: a built ring is read-only, safe from any thread. Ownership: the caller owns the
 * value (gw_hashring_deinit frees its points).
 */
#ifndef HERALD_GATEWAY_GW_HASHRING_H
#define HERALD_GATEWAY_GW_HASHRING_H

#include <stddef.h>
#include <stdint.h>

#define GW_HASHRING_POINTS 160

typedef struct gw_hashring_point_s {
    uint64_t hash;
    uint32_t server;
} gw_hashring_point_t;

typedef struct gw_hashring_s {
    gw_hashring_point_t *points; /* sorted by hash */
    size_t n_points;
    uint32_t n_servers;
} gw_hashring_t;

/* The 64-bit hash the ring places names and points with (FNV-1a 64 with a final mix).
 * Thread: any. */
uint64_t gw_hashring_hash(const char *data, size_t len);

/* Builds the ring for n servers named names[i] (e.g. "127.0.0.1:6379"); server i keeps index
 * i. Returns: 0; -EINVAL (n == 0); -ENOMEM. */
int gw_hashring_init(gw_hashring_t *r, const char *const *names, uint32_t n);

void gw_hashring_deinit(gw_hashring_t *r);

/* The server index of key[0..len). */
uint32_t gw_hashring_lookup(const gw_hashring_t *r, const char *key, size_t len);

#endif

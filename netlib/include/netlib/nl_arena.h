/*
 * nl_arena: memory for short-lived objects made in bursts, kept apart from the heap that holds
 * the long-lived ones, and given back to the kernel when a burst is over.
 *
 * What it is for: a burst of requests that each live a few milliseconds (a thousand clients
 * connecting at once, each Connect's token copied for a worker to verify) interleaved with
 * objects that live for hours (those clients' sessions and subscriptions). From malloc, the
 * short-lived ones raise the heap to the burst's peak and leave holes between the long-lived
 * ones when they go, which the process keeps for good: with 10,000 clients pipelining
 * Subscribe behind Connect (bench_gw_idle --pipelined), tens to a hundred and more bytes per
 * idle connection, varying with the burst's timing. An arena carves allocations one after
 * another out of chunks mapped from the kernel (NL_ARENA_CHUNK bytes) and counts the live ones
 * in each chunk; a chunk whose last allocation is freed is unmapped, except the one being
 * carved, which starts over. So an idle arena holds at most one chunk, whatever the burst,
 * and none after nl_arena_trim.
 * An allocation larger than a chunk comes from malloc.
 *
 * Thread: an arena belongs to one thread (an IO loop): nl_arena_alloc and nl_arena_free run
 * there only. Other threads may read and write an allocation's bytes while it is live (a
 * worker filling in a verdict), with the usual hand-over (a pool task and its done post).
 * Ownership: the caller owns the nl_arena_t value (init/deinit) and frees each allocation
 * with nl_arena_free on the same arena.
 * Usage: nl_arena_init(&a); p = nl_arena_alloc(&a, n); ... nl_arena_free(&a, p);
 *        nl_arena_deinit(&a) once nothing is live.
 */
#ifndef HERALD_NETLIB_NL_ARENA_H
#define HERALD_NETLIB_NL_ARENA_H

#include <stddef.h>
#include <stdint.h>

/* Bytes mapped per chunk: about a hundred token checks' worth. */
#define NL_ARENA_CHUNK (32u * 1024u)

struct nl__arena_chunk_s;

/* Transparent so it can be embedded; touch its fields only through nl_arena_*. */
typedef struct nl_arena_s {
    struct nl__arena_chunk_s *cur; /* the chunk being carved; NULL before the first use */
    uint64_t chunks;               /* chunks mapped now, the current one included */
    uint64_t live;                 /* allocations not yet freed */
} nl_arena_t;

/* Sets up an empty arena; maps nothing. Thread: the owner's. */
void nl_arena_init(nl_arena_t *a);

/* Unmaps the current chunk if nothing in it is live. An arena with live allocations keeps
 * their chunks mapped (a bug in the caller; the memory is not reused). Thread: the owner's. */
void nl_arena_deinit(nl_arena_t *a);

/* Unmaps the current chunk if nothing in it is live, so an arena that went quiet after a
 * burst holds nothing at all (the next allocation maps a chunk again). For an occasional
 * housekeeping pass, not for every free: a trickle of allocations would map and unmap a chunk
 * each. Thread: the owner's. */
void nl_arena_trim(nl_arena_t *a);

/* n bytes, aligned to 16, uninitialised. Returns NULL on ENOMEM (no chunk could be mapped,
 * or malloc failed for a large one). Thread: the owner's. Ownership: the caller's, freed with
 * nl_arena_free. */
void *nl_arena_alloc(nl_arena_t *a, size_t n);

/* Frees p (NULL: nothing). The last allocation of a chunk other than the current one unmaps
 * it. Thread: the owner's. */
void nl_arena_free(nl_arena_t *a, void *p);

#endif

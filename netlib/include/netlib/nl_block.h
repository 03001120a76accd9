/*
 * nl_block: an immutable, reference-counted byte block shared by many connections: the
 * encoded Push frame of a fan-out sits once in memory and every subscriber's output queue
 * holds a reference (DESIGN.md, "One message, end to end").
 *
 * Thread: ref/unref are C11 atomics, safe from any thread. The bytes are written only by the
 * creator before the block is first shared, and never after.
 * Ownership: nl_block_new returns one reference; each nl_block_ref adds one; the last
 * nl_block_unref frees the block. nl_conn_send_block takes its own reference;
 * nl_conn_send_block_ref consumes one the caller took (nl_block_ref_n, for many at once).
 * Usage: b = nl_block_new(len); memcpy(nl_block_data(b), ...); for each conn:
 *        nl_conn_send_block(c, b); nl_block_unref(b);
 */
#ifndef HERALD_NETLIB_NL_BLOCK_H
#define HERALD_NETLIB_NL_BLOCK_H

#include <stddef.h>
#include <stdint.h>

typedef struct nl_block_s nl_block_t;

/* Allocates a block of len bytes (contents undefined) with one reference. Returns NULL on
 * ENOMEM. Thread: any. */
nl_block_t *nl_block_new(size_t len);

/* Adds a reference and returns b. Thread: any. */
nl_block_t *nl_block_ref(nl_block_t *b);

/* Drops a reference; frees the block at zero. Thread: any. */
void nl_block_unref(nl_block_t *b);

/* n references in one atomic operation, for a fan-out that hands one to each of n
 * connections (nl_conn_send_block_ref) and drops the unused ones with nl_block_unref_n.
 * The caller must already hold a reference. Thread: any. */
void nl_block_ref_n(nl_block_t *b, size_t n);
void nl_block_unref_n(nl_block_t *b, size_t n);

/* The bytes (writable only before the block is shared) and their length. */
uint8_t *nl_block_data(nl_block_t *b);
size_t nl_block_len(const nl_block_t *b);

/* The references held now: for tests and assertions. Another thread's ref or unref may change
 * it at once. Thread: any. */
size_t nl_block_refs(const nl_block_t *b);

#endif

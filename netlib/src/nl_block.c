/*
 * nl_block: one allocation holds the header and the bytes, so a block costs one malloc and
 * one free however many connections share it (Redis's embedded-string robj does the same).
 */
#include "netlib/nl_block.h"

#include <stdatomic.h>
#include <stdlib.h>

#include "netlib/nl_common.h"
#include "nl_block_int.h"

nl_block_t *nl_block_new(size_t len)
{
    if (len > SIZE_MAX - sizeof(nl_block_t))
        return NULL;
    nl_block_t *b = malloc(sizeof *b + len);
    if (b == NULL)
        return NULL;
    atomic_init(&b->refs, 1);
    b->len = len;
    return b;
}

nl_block_t *nl_block_ref(nl_block_t *b)
{
    nl_block_ref_n(b, 1);
    return b;
}

void nl_block_ref_n(nl_block_t *b, size_t n)
{
    /* Relaxed suffices: whoever hands the block on already holds a reference, and the
     * hand-over itself (a post queue, a mutex) orders the bytes (Boost shared_ptr, Redis). */
    size_t old = atomic_fetch_add_explicit(&b->refs, n, memory_order_relaxed);
    NL_ASSERT(old > 0);
}

void nl_block_unref_n(nl_block_t *b, size_t n)
{
    if (n == 0)
        return;
    /* acq_rel: this thread's reads of the bytes happen before the free in whichever thread
     * drops the last reference, and that thread sees every earlier release. */
    size_t old = atomic_fetch_sub_explicit(&b->refs, n, memory_order_acq_rel);
    NL_ASSERT(old >= n);
    if (old == n)
        free(b);
}

void nl_block_unref(nl_block_t *b)
{
    if (b != NULL)
        nl_block_unref_n(b, 1);
}

uint8_t *nl_block_data(nl_block_t *b)
{
    return b->data;
}

size_t nl_block_len(const nl_block_t *b)
{
    return b->len;
}

size_t nl_block_refs(const nl_block_t *b)
{
    return atomic_load_explicit(&b->refs, memory_order_relaxed);
}

/*
 * nl_block_int.h: the block's layout, for netlib's own per-delivery paths (nl_conn_out.c),
 * which read a block's length once per queued reference and write. Private to netlib; the
 * public API stays nl_block.h.
 */
#ifndef HERALD_NETLIB_NL_BLOCK_INT_H
#define HERALD_NETLIB_NL_BLOCK_INT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "netlib/nl_block.h"

struct nl_block_s {
    atomic_size_t refs;
    size_t len;
    /* 16 bytes of header keep the data 16-byte aligned on 64-bit Linux. */
    uint8_t data[];
};

static inline size_t nl__block_len(const nl_block_t *b)
{
    return b->len;
}

#endif

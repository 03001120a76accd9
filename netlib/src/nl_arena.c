/*
 * nl_arena: bump allocation in kernel-mapped chunks, each unmapped by its last free (see
 * nl_arena.h).
 *
 * Layout: a chunk starts with its header (the count of live allocations and the carving
 * offset); each allocation is preceded by a 16-byte tag naming its chunk, or NULL for one that
 * came from malloc, so nl_arena_free needs nothing but the pointer. Allocations are carved in
 * order and never reused one by one: a chunk is reused whole, once empty, if it is the current
 * one, and unmapped otherwise. Requests that finish in roughly the order they started (token
 * checks through a FIFO pool) empty their chunks one after another, so a burst's chunks go
 * back to the kernel as it drains.
 *
 * Why mmap rather than malloc for the chunks: a chunk from malloc would sit in the very heap
 * this keeps the burst out of, and its free would leave a 32 KiB hole there instead of many
 * small ones. munmap gives the pages back at once.
 */
#include "netlib/nl_arena.h"

#include <stdlib.h>
#include <sys/mman.h>

#include "netlib/nl_common.h"

typedef struct nl__arena_chunk_s {
    uint32_t used; /* bytes carved, the header included */
    uint32_t live; /* allocations not yet freed */
} nl__arena_chunk_t;

/* In front of every allocation: its chunk (NULL: malloc'd), padded to keep 16-byte alignment. */
typedef struct arena_tag_s {
    nl__arena_chunk_t *chunk;
    uint64_t pad;
} arena_tag_t;

#define ARENA_ALIGN 16u
#define ARENA_HEAD ((uint32_t)((sizeof(nl__arena_chunk_t) + ARENA_ALIGN - 1) & ~(ARENA_ALIGN - 1)))

_Static_assert(sizeof(arena_tag_t) == ARENA_ALIGN, "a tag keeps the alignment");

void nl_arena_init(nl_arena_t *a)
{
    a->cur = NULL;
    a->chunks = 0;
    a->live = 0;
}

static void arena_unmap(nl_arena_t *a, nl__arena_chunk_t *c)
{
    munmap(c, NL_ARENA_CHUNK);
    a->chunks--;
}

void nl_arena_trim(nl_arena_t *a)
{
    if (a->cur && a->cur->live == 0) {
        arena_unmap(a, a->cur);
        a->cur = NULL;
    }
}

void nl_arena_deinit(nl_arena_t *a)
{
    nl_arena_trim(a);
    a->cur = NULL;
}

static nl__arena_chunk_t *arena_map(nl_arena_t *a)
{
    void *p =
        mmap(NULL, NL_ARENA_CHUNK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    nl__arena_chunk_t *c = p;
    c->used = ARENA_HEAD;
    c->live = 0;
    a->chunks++;
    return c;
}

void *nl_arena_alloc(nl_arena_t *a, size_t n)
{
    size_t need = sizeof(arena_tag_t) + ((n + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1));
    if (n > NL_ARENA_CHUNK || need > NL_ARENA_CHUNK - ARENA_HEAD) {
        arena_tag_t *t = malloc(need);
        if (!t)
            return NULL;
        t->chunk = NULL;
        a->live++;
        return t + 1;
    }
    nl__arena_chunk_t *c = a->cur;
    if (!c || c->used + need > NL_ARENA_CHUNK) {
        /* The full chunk is left to its live allocations: the last one to go unmaps it (an
         * empty current chunk was already rewound by that free). */
        c = arena_map(a);
        if (!c)
            return NULL;
        a->cur = c;
    }
    arena_tag_t *t = (arena_tag_t *)((char *)c + c->used);
    c->used += (uint32_t)need;
    c->live++;
    t->chunk = c;
    a->live++;
    return t + 1;
}

void nl_arena_free(nl_arena_t *a, void *p)
{
    if (!p)
        return;
    arena_tag_t *t = (arena_tag_t *)p - 1;
    nl__arena_chunk_t *c = t->chunk;
    NL_ASSERT(a->live > 0);
    a->live--;
    if (!c) {
        free(t);
        return;
    }
    NL_ASSERT(c->live > 0);
    if (--c->live > 0)
        return;
    if (c == a->cur)
        c->used = ARENA_HEAD; /* carved again from the start: its pages stay warm */
    else
        arena_unmap(a, c);
}

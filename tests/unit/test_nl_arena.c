/*
 * test_nl_arena: nl_arena's chunks are mapped as allocations need them and unmapped by the
 * last free of each (but the current one, which is rewound and reused, and goes with
 * nl_arena_trim), so an arena that a burst filled holds one chunk once the burst is over,
 * whatever order its allocations went in;
 * allocations are 16-byte aligned and do not overlap; a large one comes from malloc.
 */
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "netlib/nl_arena.h"

/* Allocations of this size fill several chunks when there are BURST of them. */
#define ITEM 300u
#define BURST 1000u

static uint8_t **burst_alloc(nl_arena_t *a, size_t n, size_t len)
{
    uint8_t **p = calloc(n, sizeof(*p));
    assert_non_null(p);
    for (size_t i = 0; i < n; i++) {
        p[i] = nl_arena_alloc(a, len);
        assert_non_null(p[i]);
        assert_int_equal((uintptr_t)p[i] % 16, 0);
        memset(p[i], (int)(i & 0xff), len);
    }
    /* Nothing overlaps: every byte still holds what its own allocation wrote. */
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < len; k++)
            assert_int_equal(p[i][k], (uint8_t)(i & 0xff));
    return p;
}

/* A burst maps as many chunks as it needs; freed in order, they go back one by one and the
 * arena ends with the current chunk only, which the next allocation reuses from its start. */
static void test_nl_arena_burst_gives_chunks_back(void **state)
{
    (void)state;
    nl_arena_t a;
    nl_arena_init(&a);
    assert_int_equal(a.chunks, 0);
    uint8_t **p = burst_alloc(&a, BURST, ITEM);
    assert_int_equal(a.live, BURST);
    size_t need = BURST * (ITEM + 20) / NL_ARENA_CHUNK;
    assert_true(a.chunks >= need);
    for (size_t i = 0; i < BURST; i++)
        nl_arena_free(&a, p[i]);
    assert_int_equal(a.live, 0);
    assert_int_equal(a.chunks, 1);
    /* The current chunk was rewound: the next allocation reuses the start of the burst's
     * last chunk, an address the burst already had, and again after its free. */
    uint8_t *again = nl_arena_alloc(&a, ITEM);
    bool is_reused = false;
    for (size_t i = 0; i < BURST; i++)
        is_reused |= again == p[i];
    assert_true(is_reused);
    nl_arena_free(&a, again);
    assert_ptr_equal(nl_arena_alloc(&a, ITEM), again);
    nl_arena_free(&a, again);
    /* Trimmed, the quiet arena holds nothing, and maps a chunk again when asked. */
    nl_arena_trim(&a);
    assert_int_equal(a.chunks, 0);
    void *next = nl_arena_alloc(&a, ITEM);
    assert_non_null(next);
    assert_int_equal(a.chunks, 1);
    nl_arena_trim(&a); /* a live allocation keeps its chunk */
    assert_int_equal(a.chunks, 1);
    nl_arena_free(&a, next);
    nl_arena_deinit(&a);
    assert_int_equal(a.chunks, 0);
    free(p);
}

/* One allocation left in an old chunk keeps that chunk, and only that one, mapped; its free
 * unmaps it. */
static void test_nl_arena_straggler_keeps_its_chunk(void **state)
{
    (void)state;
    nl_arena_t a;
    nl_arena_init(&a);
    uint8_t **p = burst_alloc(&a, BURST, ITEM);
    uint64_t peak = a.chunks;
    assert_true(peak >= 3);
    for (size_t i = 1; i < BURST; i++)
        nl_arena_free(&a, p[i]);
    assert_int_equal(a.live, 1);
    assert_int_equal(a.chunks, 2); /* the straggler's and the current one */
    for (size_t k = 0; k < ITEM; k++)
        assert_int_equal(p[0][k], 0);
    nl_arena_free(&a, p[0]);
    assert_int_equal(a.chunks, 1);
    nl_arena_deinit(&a);
    assert_int_equal(a.chunks, 0);
    free(p);
}

/* Freed in reverse or scattered order, the chunks go just the same. */
static void test_nl_arena_any_order(void **state)
{
    (void)state;
    nl_arena_t a;
    nl_arena_init(&a);
    uint8_t **p = burst_alloc(&a, BURST, ITEM);
    for (size_t i = 0; i < BURST; i += 2)
        nl_arena_free(&a, p[BURST - 1 - i]);
    for (size_t i = 1; i < BURST; i += 2)
        nl_arena_free(&a, p[BURST - 1 - i]);
    assert_int_equal(a.live, 0);
    assert_int_equal(a.chunks, 1);
    nl_arena_deinit(&a);
    assert_int_equal(a.chunks, 0);
    free(p);
}

/* Larger than a chunk: from malloc, no chunk mapped for it; freed like the others. */
static void test_nl_arena_large_from_malloc(void **state)
{
    (void)state;
    nl_arena_t a;
    nl_arena_init(&a);
    size_t len = NL_ARENA_CHUNK + 1;
    uint8_t *big = nl_arena_alloc(&a, len);
    assert_non_null(big);
    assert_int_equal((uintptr_t)big % 16, 0);
    memset(big, 0x5a, len);
    assert_int_equal(a.chunks, 0);
    assert_int_equal(a.live, 1);
    uint8_t *small = nl_arena_alloc(&a, 1);
    assert_non_null(small);
    assert_int_equal(a.chunks, 1);
    nl_arena_free(&a, big);
    nl_arena_free(&a, small);
    nl_arena_free(&a, NULL);
    assert_int_equal(a.live, 0);
    nl_arena_deinit(&a);
    assert_int_equal(a.chunks, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nl_arena_burst_gives_chunks_back),
        cmocka_unit_test(test_nl_arena_straggler_keeps_its_chunk),
        cmocka_unit_test(test_nl_arena_any_order),
        cmocka_unit_test(test_nl_arena_large_from_malloc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

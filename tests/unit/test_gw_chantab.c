/*
 * test_gw_chantab: the channel hash table under the subscription index and the memory
 * engine. Every key inserted is found (the same object), every name not inserted is not;
 * removal in random order keeps the rest findable (backward-shift deletion); the table grows
 * and shrinks through it; keys that share a hash, or share a home slot but differ in the hash
 * bits a slot's tag carries, are told apart by the full hash and the name.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gw_channel.h"

#define N_KEYS 20000
#define NAME_CAP 32

typedef struct obj_s {
    gw_chankey_t key;
    char name[NAME_CAP];
} obj_t;

/* A heap object keyed name, with hash (the real one unless a test forces another). */
static obj_t *obj_new(const char *name, uint32_t hash)
{
    obj_t *o = calloc(1, sizeof(*o));
    assert_non_null(o);
    size_t len = strlen(name);
    assert_true(len < NAME_CAP);
    memcpy(o->name, name, len);
    o->key.name_len = (uint16_t)len;
    o->key.hash = hash;
    return o;
}

static gw_chankey_t *find(const gw_chantab_t *t, const char *name, uint32_t hash)
{
    return gw_chantab_find(t, name, strlen(name), hash);
}

static gw_chankey_t *find_real(const gw_chantab_t *t, const char *name)
{
    return find(t, name, gw_chantab_hash(name, strlen(name)));
}

/* Keys on every slot walked, which must match the table's count. */
static uint32_t walk_count(const gw_chantab_t *t)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i <= t->mask; i++)
        n += gw_chantab_slot(t, i) != NULL;
    return n;
}

static void test_gw_chantab_many_keys(void **state)
{
    (void)state;
    gw_chantab_t t;
    assert_int_equal(gw_chantab_init(&t), 0);
    static obj_t *objs[N_KEYS];
    char name[NAME_CAP];
    for (int i = 0; i < N_KEYS; i++) {
        snprintf(name, sizeof(name), "lg:u:%d", i);
        objs[i] = obj_new(name, gw_chantab_hash(name, strlen(name)));
        assert_int_equal(gw_chantab_insert(&t, &objs[i]->key), 0);
    }
    assert_int_equal(t.count, N_KEYS);
    assert_int_equal(walk_count(&t), N_KEYS);
    uint32_t grown = t.mask + 1;
    for (int i = 0; i < N_KEYS; i++) {
        assert_ptr_equal(find_real(&t, objs[i]->name), &objs[i]->key);
        snprintf(name, sizeof(name), "lg:x:%d", i);
        assert_null(find_real(&t, name));
    }
    /* Remove 7 in 8, in a shuffled order: the table shrinks below 1/8 full. */
    int order[N_KEYS];
    for (int i = 0; i < N_KEYS; i++)
        order[i] = i;
    unsigned r = 7;
    for (int i = N_KEYS - 1; i > 0; i--) {
        r = r * 1103515245u + 12345u;
        int j = (int)((r >> 8) % (unsigned)(i + 1));
        int tmp = order[i];
        order[i] = order[j];
        order[j] = tmp;
    }
    for (int k = 0; k < N_KEYS; k++) {
        int i = order[k];
        if (i % 8 != 0) {
            gw_chantab_remove(&t, &objs[i]->key);
            free(objs[i]);
            objs[i] = NULL;
        }
    }
    assert_int_equal(t.count, N_KEYS / 8);
    assert_int_equal(walk_count(&t), N_KEYS / 8);
    assert_true(t.mask + 1 < grown); /* it shrank */
    for (int i = 0; i < N_KEYS; i++) {
        snprintf(name, sizeof(name), "lg:u:%d", i);
        gw_chankey_t *k = find_real(&t, name);
        if (objs[i])
            assert_ptr_equal(k, &objs[i]->key);
        else
            assert_null(k);
    }
    for (int i = 0; i < N_KEYS; i += 8) {
        gw_chantab_remove(&t, &objs[i]->key);
        free(objs[i]);
    }
    assert_int_equal(t.count, 0);
    gw_chantab_deinit(&t);
}

/* Keys with one hash: same home slot and same tag, so only the name tells them apart. */
static void test_gw_chantab_same_hash(void **state)
{
    (void)state;
    enum { N = 50 };
    const uint32_t hash = 0x9e3779b9u;
    gw_chantab_t t;
    assert_int_equal(gw_chantab_init(&t), 0);
    obj_t *objs[N];
    char name[NAME_CAP];
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof(name), "same-%d", i);
        objs[i] = obj_new(name, hash);
        assert_int_equal(gw_chantab_insert(&t, &objs[i]->key), 0);
    }
    for (int i = 0; i < N; i++)
        assert_ptr_equal(find(&t, objs[i]->name, hash), &objs[i]->key);
    assert_null(find(&t, "same-50", hash));
    /* Out of the middle of the run: the later ones must still be reachable. */
    gw_chantab_remove(&t, &objs[10]->key);
    free(objs[10]);
    for (int i = 0; i < N; i++)
        if (i != 10)
            assert_ptr_equal(find(&t, objs[i]->name, hash), &objs[i]->key);
    assert_null(find(&t, "same-10", hash));
    for (int i = 0; i < N; i++)
        if (i != 10) {
            gw_chantab_remove(&t, &objs[i]->key);
            free(objs[i]);
        }
    gw_chantab_deinit(&t);
}

/* A name looked up with a hash that differs only in its top bits (the tag's, not the home
 * slot's) must miss, and so must one with the same hash but another name. */
static void test_gw_chantab_tag_bits(void **state)
{
    (void)state;
    gw_chantab_t t;
    assert_int_equal(gw_chantab_init(&t), 0);
    const uint32_t hash = 0x00000123u;
    obj_t *a = obj_new("alpha", hash);
    obj_t *b = obj_new("beta", hash | 0xfe000000u); /* same home, other tag */
    assert_int_equal(gw_chantab_insert(&t, &a->key), 0);
    assert_int_equal(gw_chantab_insert(&t, &b->key), 0);
    assert_ptr_equal(find(&t, "alpha", hash), &a->key);
    assert_ptr_equal(find(&t, "beta", hash | 0xfe000000u), &b->key);
    assert_null(find(&t, "alpha", hash | 0xfe000000u));
    assert_null(find(&t, "beta", hash));
    assert_null(find(&t, "gamma", hash));
    gw_chantab_remove(&t, &a->key);
    assert_ptr_equal(find(&t, "beta", hash | 0xfe000000u), &b->key);
    gw_chantab_remove(&t, &b->key);
    free(a);
    free(b);
    gw_chantab_deinit(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gw_chantab_many_keys),
        cmocka_unit_test(test_gw_chantab_same_hash),
        cmocka_unit_test(test_gw_chantab_tag_bits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

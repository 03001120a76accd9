/*
 * test_gw_online: the per-loop user table and name lists (gateway/gw_online.c). Connections are
 * fake: structs that embed a gw_chankey_t followed by the user id, as a session does. Covered:
 * a user's first and last connection (the return values the engine hears from), a second
 * connection moving the user into a group and the last but one moving it back, removal in any
 * order, find and foreach against a model, stamps across the 16-bit wrap, and the distinct
 * count over several lists (repeats within a list, overlaps across lists, equal hashes with
 * different names).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gw_state.h"

typedef struct conn_s {
    gw_chankey_t key;
    char user[32];
} conn_t;

static void conn_init(conn_t *c, const char *user)
{
    memset(c, 0, sizeof(*c));
    snprintf(c->user, sizeof(c->user), "%s", user);
    c->key.name_len = (uint16_t)strlen(c->user);
    c->key.hash = gw_online_hash(c->user, c->key.name_len);
}

static uint32_t find(const gw_online_t *t, const char *user, gw_online_user_t *u)
{
    return gw_online_find(t, user, strlen(user), gw_online_hash(user, strlen(user)), u);
}

static bool has_conn(const gw_online_user_t *u, const conn_t *c)
{
    for (uint32_t i = 0; i < u->n; i++)
        if (u->conns[i] == &c->key)
            return true;
    return false;
}

static void test_gw_online_first_and_last(void **state)
{
    (void)state;
    gw_online_t t;
    assert_int_equal(gw_online_init(&t), 0);
    conn_t a1, a2, a3, b1;
    conn_init(&a1, "alice");
    conn_init(&a2, "alice");
    conn_init(&a3, "alice");
    conn_init(&b1, "bob");
    assert_int_equal(gw_online_add(&t, &a1.key), 1);
    assert_int_equal(gw_online_add(&t, &b1.key), 1);
    assert_int_equal(gw_online_add(&t, &a2.key), 0); /* alice moves into a group */
    assert_int_equal(gw_online_add(&t, &a3.key), 0);
    assert_int_equal(gw_online_users(&t), 2);
    assert_int_equal(t.conns, 4);
    assert_int_equal(t.singles.count, 1);
    assert_int_equal(t.groups.count, 1);

    gw_online_user_t u;
    assert_int_equal(find(&t, "alice", &u), 3);
    assert_true(has_conn(&u, &a1) && has_conn(&u, &a2) && has_conn(&u, &a3));
    assert_int_equal(find(&t, "bob", &u), 1);
    assert_ptr_equal(u.conns[0], &b1.key);
    assert_int_equal(find(&t, "carol", &u), 0);

    /* Out of the group in the middle, then the first: alice goes back to singles. */
    assert_int_equal(gw_online_remove(&t, &a2.key), 0);
    assert_int_equal(gw_online_remove(&t, &a1.key), 0);
    assert_int_equal(t.groups.count, 0);
    assert_int_equal(t.singles.count, 2);
    assert_int_equal(find(&t, "alice", &u), 1);
    assert_ptr_equal(u.conns[0], &a3.key);
    /* A connection that is not in the table (any more). */
    assert_int_equal(gw_online_remove(&t, &a2.key), -ENOENT);
    assert_int_equal(gw_online_remove(&t, &a3.key), 1);
    assert_int_equal(gw_online_remove(&t, &b1.key), 1);
    assert_int_equal(gw_online_users(&t), 0);
    assert_int_equal(t.conns, 0);
    gw_online_deinit(&t);
}

typedef struct tally_s {
    uint32_t users;
    uint32_t conns;
    uint32_t per_user[64];
} tally_t;

static void tally_user(const gw_online_user_t *u, void *arg)
{
    tally_t *t = arg;
    t->users++;
    t->conns += u->n;
    /* Every connection of a user carries that user's name. */
    const conn_t *first = (const conn_t *)u->conns[0];
    for (uint32_t i = 0; i < u->n; i++)
        assert_string_equal(((const conn_t *)u->conns[i])->user, first->user);
    int idx = atoi(first->user + 1);
    t->per_user[idx] = u->n;
}

/* 64 users, a varying number of connections each, removed in a scrambled order: find and
 * foreach agree with a model after every step. */
static void test_gw_online_model(void **state)
{
    (void)state;
    enum { USERS = 64, MAXC = 5 };
    static conn_t conns[USERS][MAXC];
    uint32_t model[USERS] = {0};
    gw_online_t t;
    assert_int_equal(gw_online_init(&t), 0);
    for (int c = 0; c < MAXC; c++) {
        for (int u = 0; u < USERS; u++) {
            if (c >= 1 + u % MAXC)
                continue;
            char name[8];
            snprintf(name, sizeof(name), "u%d", u);
            conn_init(&conns[u][c], name);
            assert_int_equal(gw_online_add(&t, &conns[u][c].key), model[u] == 0 ? 1 : 0);
            model[u]++;
        }
    }
    for (int step = 0; step < USERS * MAXC; step++) {
        int u = (step * 37) % USERS;
        int c = (step * 11) % MAXC;
        if (c >= 1 + u % MAXC || conns[u][c].key.user == 0xffff)
            continue;
        int rc = gw_online_remove(&t, &conns[u][c].key);
        model[u]--;
        assert_int_equal(rc, model[u] == 0 ? 1 : 0);
        conns[u][c].key.user = 0xffff; /* removed (the spare bits are the test's here) */
        tally_t tl;
        memset(&tl, 0, sizeof(tl));
        gw_online_foreach(&t, tally_user, &tl);
        uint32_t want_users = 0;
        uint32_t want_conns = 0;
        for (int k = 0; k < USERS; k++) {
            want_users += model[k] > 0;
            want_conns += model[k];
            assert_int_equal(tl.per_user[k], model[k]);
            char name[8];
            snprintf(name, sizeof(name), "u%d", k);
            gw_online_user_t view;
            assert_int_equal(find(&t, name, &view), model[k]);
        }
        assert_int_equal(tl.users, want_users);
        assert_int_equal(tl.conns, want_conns);
        assert_int_equal(gw_online_users(&t), want_users);
        assert_int_equal(t.conns, want_conns);
    }
    gw_online_deinit(&t);
}

/* deinit frees groups still in the table (ASan would report a leak). */
static void test_gw_online_deinit_with_groups(void **state)
{
    (void)state;
    gw_online_t t;
    assert_int_equal(gw_online_init(&t), 0);
    static conn_t c[10];
    for (int i = 0; i < 10; i++) {
        conn_init(&c[i], i % 2 ? "odd" : "even");
        assert_true(gw_online_add(&t, &c[i].key) >= 0);
    }
    assert_int_equal(t.groups.count, 2);
    gw_online_deinit(&t);
}

/* A stamp is the 2 s unit of the clock; gw_online_stamp_ms gives the start of that unit, also
 * across the 16-bit wrap, for any stamp up to 36 h old. */
static void test_gw_online_stamps(void **state)
{
    (void)state;
    uint64_t unit = GW_ONLINE_STAMP_MS;
    uint64_t t0 = 1000 * unit + 1500;
    uint16_t s0 = gw_online_stamp(t0);
    assert_int_equal(gw_online_stamp_ms(s0, t0), 1000 * unit);
    assert_int_equal(gw_online_stamp_ms(s0, t0 + 10 * unit), 1000 * unit);
    /* Past the wrap of the 16-bit counter. */
    uint64_t t1 = 65530 * unit + 1;
    uint16_t s1 = gw_online_stamp(t1);
    assert_int_equal(gw_online_stamp_ms(s1, t1 + 20 * unit), 65530 * unit);
    /* 24 h later: still the same time (the longest idle timeout). */
    assert_int_equal(gw_online_stamp_ms(s1, t1 + 86400000), 65530 * unit);
}

static gw_online_list_t *list_of(gw_online_list_t *l, const char *const *names, uint32_t hash_or0)
{
    memset(l, 0, sizeof(*l));
    for (; *names; names++) {
        size_t len = strlen(*names);
        uint32_t h = hash_or0 ? hash_or0 : gw_online_hash(*names, len);
        long off = gw_online_list_add(l, *names, len, h);
        assert_true(off >= 0);
        size_t got_len;
        const char *got = gw_online_list_name(l, off, &got_len);
        assert_int_equal(got_len, len);
        assert_string_equal(got, *names); /* NUL-terminated */
    }
    return l;
}

static void test_gw_online_list_distinct(void **state)
{
    (void)state;
    gw_online_list_t a;
    gw_online_list_t b;
    gw_online_list_t c;
    static const char *const na[] = {"alice", "bob", "alice", "a-much-longer-user-id-0123", NULL};
    static const char *const nb[] = {"bob", "carol", "", NULL};
    gw_online_list_t *lists[] = {list_of(&a, na, 0), list_of(&b, nb, 0)};
    assert_int_equal(a.count, 4);
    /* alice, bob, the long one, carol, and the empty name. */
    assert_int_equal(gw_online_list_distinct(lists, 2), 5);
    assert_int_equal(gw_online_list_distinct(lists, 1), 3);
    assert_int_equal(gw_online_list_distinct(lists, 0), 0);
    /* Equal hashes do not make equal users: the names decide. */
    static const char *const nc[] = {"x", "y", "x", "z", NULL};
    gw_online_list_t *same_hash[] = {list_of(&c, nc, 42)};
    assert_int_equal(gw_online_list_distinct(same_hash, 1), 3);
    /* An empty list is fine. */
    gw_online_list_t empty;
    memset(&empty, 0, sizeof(empty));
    gw_online_list_t *with_empty[] = {&empty, &b};
    assert_int_equal(gw_online_list_distinct(with_empty, 2), 3);
    /* Many records grow the buffer: offsets stay valid. */
    gw_online_list_t big;
    memset(&big, 0, sizeof(big));
    for (int i = 0; i < 5000; i++) {
        char name[16];
        snprintf(name, sizeof(name), "user%d", i % 2500);
        assert_true(
            gw_online_list_add(&big, name, strlen(name), gw_online_hash(name, strlen(name))) >= 0);
    }
    gw_online_list_t *bigs[] = {&big};
    assert_int_equal(gw_online_list_distinct(bigs, 1), 2500);
    gw_online_list_free(&a);
    gw_online_list_free(&b);
    gw_online_list_free(&c);
    gw_online_list_free(&big);
    assert_null(big.buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gw_online_first_and_last),
        cmocka_unit_test(test_gw_online_model),
        cmocka_unit_test(test_gw_online_deinit_with_groups),
        cmocka_unit_test(test_gw_online_stamps),
        cmocka_unit_test(test_gw_online_list_distinct),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

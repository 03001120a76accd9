/*
 * test_gw_redis_schema: the pub/sub envelope parser (table-driven: every malformed envelope
 * is a plain payload, never an error), key names, and the "herald" function library run by a
 * real redis-server: offsets consecutive, the epoch created once and kept (a node's candidate
 * used only when there is none), the stream keeping what keep says with ids = offsets, the
 * envelope published on herald:C and parsed back to the same message, herald_join reporting
 * the latest offset, and herald_fence starting a new epoch (offset 0, stream dropped) exactly
 * when Redis holds less of a channel's epoch than a node delivered. hiredis's blocking API
 * talks to Redis here.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "gw_redis_schema.h"
#include "redis_harness.h"

typedef struct {
    const char *data;
    size_t len;
    bool is_sequenced;
    uint64_t offset;
    uint64_t epoch;
    uint64_t time_ms;
    const char *payload;
} parse_row_t;

#define ROW(s) s, sizeof(s) - 1
static const parse_row_t parse_rows[] = {
    {ROW("\0H1 7 00000000000000ff 1735700000000\nhello"), true, 7, 0xff, 1735700000000, "hello"},
    {ROW("\0H1 1 0123456789abcdef 0\n"), true, 1, 0x0123456789abcdef, 0, ""},
    {ROW("\0H1 1 0123456789abcdef 5\n\0H1 x"), true, 1, 0x0123456789abcdef, 5, "\0H1 x"},
    {ROW("hello"), false, 0, 0, 0, "hello"},
    {ROW(""), false, 0, 0, 0, ""},
    {ROW("\0H1"), false, 0, 0, 0, "\0H1"},
    {ROW("\0H1 0 0123456789abcdef 5\nx"), false, 0, 0, 0, NULL}, /* offset 0 */
    {ROW("\0H1 1 0123456789ABCDEF 5\nx"), false, 0, 0, 0, NULL}, /* upper-case epoch */
    {ROW("\0H1 1 0123456789abcde 5\nx"), false, 0, 0, 0, NULL},  /* 15 digits */
    {ROW("\0H1 1 0123456789abcdef 5x"), false, 0, 0, 0, NULL},   /* no newline */
    {ROW("\0H1 99999999999999999999 0123456789abcdef 5\nx"), false, 0, 0, 0, NULL}, /* > 2^64 */
    {ROW("\0H2 1 0123456789abcdef 5\nx"), false, 0, 0, 0, NULL}, /* another version */
};

static void test_gw_redis_schema_parse_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(parse_rows) / sizeof(parse_rows[0]); i++) {
        const parse_row_t *r = &parse_rows[i];
        gw_redis_msg_t m;
        gw_redis_msg_parse(r->data, r->len, &m);
        if (m.is_sequenced != r->is_sequenced)
            fail_msg("row %zu: sequenced %d", i, m.is_sequenced);
        if (!r->is_sequenced) {
            /* A plain payload: all of it, untouched. */
            assert_ptr_equal(m.payload, r->data);
            assert_int_equal(m.len, r->len);
            assert_int_equal(m.offset, 0);
            continue;
        }
        assert_int_equal(m.offset, r->offset);
        assert_int_equal(m.epoch, r->epoch);
        assert_int_equal(m.time_ms, r->time_ms);
        size_t plen = r->len - (size_t)(m.payload - r->data);
        assert_int_equal(m.len, plen);
        assert_memory_equal(m.payload, r->payload, plen);
    }
}

static void test_gw_redis_schema_keys(void **state)
{
    (void)state;
    char buf[32];
    assert_int_equal(gw_redis_key(buf, sizeof(buf), GW_REDIS_META_PREFIX, "chat:1", 6), 15);
    assert_string_equal(buf, "herald:m:chat:1");
    assert_int_equal(gw_redis_key(buf, 15, GW_REDIS_META_PREFIX, "chat:1", 6), -1);
    size_t len;
    const char *c = gw_redis_channel_of("herald:chat:1", 13, &len);
    assert_non_null(c);
    assert_int_equal(len, 6);
    assert_memory_equal(c, "chat:1", 6);
    assert_null(gw_redis_channel_of("herald:", 7, &len));
    assert_null(gw_redis_channel_of("other:x", 7, &len));
}

/* --- the functions, in a real Redis ---------------------------------------------------------- */

static redisReply *cmd(redisContext *c, int argc, const char **argv, const size_t *lens)
{
    redisReply *r = redisCommandArgv(c, argc, argv, lens);
    if (!r)
        fail_msg("redis: %s", c->errstr);
    if (r->type == REDIS_REPLY_ERROR)
        fail_msg("redis error: %s", r->str);
    return r;
}

static void publish(redisContext *c, const char *chan, const char *payload, size_t len,
                    const char *keep, const char *candidate, uint64_t *offset, char epoch[17])
{
    char meta[64];
    char hist[64];
    gw_redis_key(meta, sizeof(meta), GW_REDIS_META_PREFIX, chan, strlen(chan));
    gw_redis_key(hist, sizeof(hist), GW_REDIS_HIST_PREFIX, chan, strlen(chan));
    const char *argv[] = {"FCALL", "herald_publish", "2",  meta, hist,
                          chan,    payload,          keep, "0",  candidate};
    size_t lens[10];
    for (int i = 0; i < 10; i++)
        lens[i] = argv[i] ? strlen(argv[i]) : 0;
    lens[6] = len;
    redisReply *r = cmd(c, candidate ? 10 : 9, argv, lens);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 4);
    assert_int_equal(r->element[3]->integer, 0); /* no key: never a duplicate */
    *offset = (uint64_t)r->element[0]->integer;
    snprintf(epoch, 17, "%s", r->element[1]->str);
    freeReplyObject(r);
}

static void test_gw_redis_schema_functions(void **state)
{
    (void)state;
    test_redis_t redis;
    int rc = test_redis_start(&redis, 0);
    if (rc != 0)
        fail_msg("redis-server did not start: %s", strerror(-rc));
    struct timeval tv = {5, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", redis.port, tv);
    redisContext *sub = redisConnectWithTimeout("127.0.0.1", redis.port, tv);
    assert_true(c && !c->err && sub && !sub->err);
    const char *load[] = {"FUNCTION", "LOAD", "REPLACE", gw_redis_functions};
    freeReplyObject(cmd(c, 4, load, NULL));
    freeReplyObject(cmd(c, 4, load, NULL)); /* every node loads it: again is fine */
    const char *subscribe[] = {"SUBSCRIBE", "herald:news"};
    freeReplyObject(cmd(sub, 2, subscribe, NULL));

    uint64_t off;
    char e1[17];
    char e2[17];
    /* The first publish makes the epoch: the node's candidate. */
    publish(c, "news", "a\0b", 3, "10", "0123456789abcdef", &off, e1);
    assert_int_equal(off, 1);
    assert_string_equal(e1, "0123456789abcdef");
    /* Later ones keep it, whatever candidate comes; none (a backend) is fine too. */
    publish(c, "news", "two", 3, "10", "fedcba9876543210", &off, e2);
    assert_int_equal(off, 2);
    assert_string_equal(e2, e1);
    for (int i = 3; i <= 30; i++) {
        publish(c, "news", "more", 4, "10", NULL, &off, e2);
        assert_int_equal(off, (uint64_t)i);
    }
    /* The subscriber saw every envelope, in order, parsing back to what was published. */
    for (uint64_t want = 1; want <= 30; want++) {
        redisReply *m = NULL;
        assert_int_equal(redisGetReply(sub, (void **)&m), REDIS_OK);
        assert_int_equal(m->elements, 3);
        gw_redis_msg_t msg;
        gw_redis_msg_parse(m->element[2]->str, m->element[2]->len, &msg);
        assert_true(msg.is_sequenced);
        assert_int_equal(msg.offset, want);
        assert_int_equal(msg.epoch, 0x0123456789abcdef);
        assert_true(msg.time_ms > 1700000000000ull);
        if (want == 1) {
            assert_int_equal(msg.len, 3);
            assert_memory_equal(msg.payload, "a\0b", 3);
        }
        freeReplyObject(m);
    }
    /* The stream keeps about 10 (MAXLEN ~), ids = offsets, ending at 30. */
    const char *xrange[] = {"XRANGE", "herald:h:news", "-", "+"};
    redisReply *x = cmd(c, 4, xrange, NULL);
    assert_true(x->elements >= 10 && x->elements <= 30);
    assert_string_equal(x->element[x->elements - 1]->element[0]->str, "30-0");
    redisReply *fields = x->element[x->elements - 1]->element[1];
    assert_string_equal(fields->element[0]->str, "p");
    assert_string_equal(fields->element[1]->str, "more");
    assert_string_equal(fields->element[2]->str, "t");
    freeReplyObject(x);
    /* keep 0: nothing kept. */
    publish(c, "plain", "x", 1, "0", NULL, &off, e2);
    const char *exists[] = {"EXISTS", "herald:h:plain"};
    x = cmd(c, 2, exists, NULL);
    assert_int_equal(x->integer, 0);
    freeReplyObject(x);
    /* herald_join: the latest offset and the epoch; a fresh channel gets the candidate. */
    const char *join[] = {"FCALL", "herald_join", "1", "herald:m:news", "aaaaaaaaaaaaaaaa"};
    x = cmd(c, 5, join, NULL);
    assert_int_equal(x->element[0]->integer, 30);
    assert_string_equal(x->element[1]->str, "0123456789abcdef");
    freeReplyObject(x);
    const char *join2[] = {"FCALL", "herald_join", "1", "herald:m:fresh", "aaaaaaaaaaaaaaaa"};
    x = cmd(c, 5, join2, NULL);
    assert_int_equal(x->element[0]->integer, 0);
    assert_string_equal(x->element[1]->str, "aaaaaaaaaaaaaaaa");
    freeReplyObject(x);
    /* The meta key expires, so channels nobody uses do not stay for ever. */
    const char *pttl[] = {"PTTL", "herald:m:news"};
    x = cmd(c, 2, pttl, NULL);
    assert_true(x->integer > 0 && x->integer <= GW_REDIS_META_TTL_MS);
    freeReplyObject(x);
    /* herald_refresh: F fields per user in each user's hash, and the hash's expiry. */
    const char *first[] = {
        "FCALL", "herald_refresh", "2", "herald:u:ann", "herald:u:bob", "3", "n/0:c", "n/0:l",
        "n/0:s", "60000",          "1", "100",          "90",           "2", "200",   "80"};
    x = cmd(c, 16, first, NULL);
    assert_int_equal(x->integer, 2);
    freeReplyObject(x);
    const char *again[] = {"FCALL", "herald_refresh", "1", "herald:u:bob", "2", "n/0:c",
                           "n/0:l", "30000",          "3", "300"};
    x = cmd(c, 10, again, NULL);
    assert_int_equal(x->integer, 1);
    freeReplyObject(x);
    static const struct {
        const char *key, *field, *value;
    } want[] = {{"herald:u:ann", "n/0:c", "1"},   {"herald:u:ann", "n/0:l", "100"},
                {"herald:u:ann", "n/0:s", "90"},  {"herald:u:bob", "n/0:c", "3"},
                {"herald:u:bob", "n/0:l", "300"}, {"herald:u:bob", "n/0:s", "80"}};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        const char *hget[] = {"HGET", want[i].key, want[i].field};
        x = cmd(c, 3, hget, NULL);
        assert_int_equal(x->type, REDIS_REPLY_STRING);
        assert_string_equal(x->str, want[i].value);
        freeReplyObject(x);
    }
    const char *pttl_bob[] = {"PTTL", "herald:u:bob"};
    x = cmd(c, 2, pttl_bob, NULL);
    assert_true(x->integer > 0 && x->integer <= 30000);
    freeReplyObject(x);
    redisFree(sub);
    redisFree(c);
    assert_int_equal(test_redis_stop(&redis), 0);
}

/* herald_fence after a failover to a replica that missed the last messages: the new master
 * has offset 7 of epoch e where a node delivered 9. */
static void test_gw_redis_schema_fence(void **state)
{
    (void)state;
    test_redis_t redis;
    int rc = test_redis_start(&redis, 0);
    if (rc != 0)
        fail_msg("redis-server did not start: %s", strerror(-rc));
    struct timeval tv = {5, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", redis.port, tv);
    assert_true(c && !c->err);
    const char *load[] = {"FUNCTION", "LOAD", "REPLACE", gw_redis_functions};
    freeReplyObject(cmd(c, 4, load, NULL));
    uint64_t off;
    char e[17];
    char e2[17];
    for (int i = 1; i <= 7; i++)
        publish(c, "room", "m", 1, "100", "0123456789abcdef", &off, e);
    for (int i = 1; i <= 3; i++)
        publish(c, "calm", "m", 1, "100", "1111111111111111", &off, e2);
    /* room: behind what the node saw (9): reset. calm: the node saw 3 of 3: left alone. gone:
     * no epoch in Redis at all (it restarted empty): left for herald_join to start one. */
    const char *fence[] = {"FCALL",
                           "herald_fence",
                           "6",
                           "herald:m:room",
                           "herald:h:room",
                           "herald:m:calm",
                           "herald:h:calm",
                           "herald:m:gone",
                           "herald:h:gone",
                           "aaaaaaaaaaaaaaaa",
                           "0123456789abcdef",
                           "9",
                           "bbbbbbbbbbbbbbbb",
                           "1111111111111111",
                           "3",
                           "cccccccccccccccc",
                           "2222222222222222",
                           "5"};
    redisReply *x = cmd(c, 18, fence, NULL);
    assert_int_equal(x->type, REDIS_REPLY_ARRAY);
    assert_int_equal(x->elements, 3);
    assert_int_equal(x->element[0]->integer, 1);
    assert_int_equal(x->element[1]->integer, 0);
    assert_int_equal(x->element[2]->integer, 0);
    freeReplyObject(x);
    const char *exists[] = {"EXISTS", "herald:h:room", "herald:m:gone"};
    x = cmd(c, 3, exists, NULL);
    assert_int_equal(x->integer, 0); /* the old epoch's stream went; nothing was made for gone */
    freeReplyObject(x);
    /* The next publish is offset 1 of the new epoch, kept in a fresh stream. */
    publish(c, "room", "after", 5, "100", "0123456789abcdef", &off, e);
    assert_int_equal(off, 1);
    assert_string_equal(e, "aaaaaaaaaaaaaaaa");
    publish(c, "calm", "after", 5, "100", NULL, &off, e2);
    assert_int_equal(off, 4);
    assert_string_equal(e2, "1111111111111111");
    /* A second fence with what the node knew before is about an epoch that is gone: no-op. */
    x = cmd(c, 18, fence, NULL);
    assert_int_equal(x->element[0]->integer, 0);
    freeReplyObject(x);
    /* A candidate equal to the epoch it replaces is not reused. */
    const char *same[] = {"FCALL",
                          "herald_fence",
                          "2",
                          "herald:m:calm",
                          "herald:h:calm",
                          "1111111111111111",
                          "1111111111111111",
                          "99"};
    x = cmd(c, 8, same, NULL);
    assert_int_equal(x->element[0]->integer, 1);
    freeReplyObject(x);
    const char *join[] = {"FCALL", "herald_join", "2", "herald:m:calm", "herald:h:calm"};
    x = cmd(c, 5, join, NULL);
    assert_int_equal(x->element[0]->integer, 0);
    assert_string_not_equal(x->element[1]->str, "1111111111111111");
    assert_int_equal(strlen(x->element[1]->str), 16);
    freeReplyObject(x);
    redisFree(c);
    assert_int_equal(test_redis_stop(&redis), 0);
}

/* herald_publish with an idempotency record: the first publish leaves it for the window, a
 * repeat is answered from it (the fourth element 1) and publishes nothing; a window of 0
 * leaves no record. */
static void test_gw_redis_schema_idempotency(void **state)
{
    (void)state;
    test_redis_t redis;
    int rc = test_redis_start(&redis, 0);
    if (rc != 0)
        fail_msg("redis-server did not start: %s", strerror(-rc));
    struct timeval tv = {5, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", redis.port, tv);
    assert_true(c && !c->err);
    const char *load[] = {"FUNCTION", "LOAD", "REPLACE", gw_redis_functions};
    freeReplyObject(cmd(c, 4, load, NULL));
    const char *first[] = {"FCALL",     "herald_publish", "3", "herald:m:k", "herald:h:k",
                           "herald:i:k a1", "k", "one", "0", "0", "0123456789abcdef", "60000"};
    redisReply *r = cmd(c, 12, first, NULL);
    assert_int_equal(r->elements, 4);
    assert_int_equal(r->element[0]->integer, 1);
    assert_int_equal(r->element[3]->integer, 0);
    long long t1 = r->element[2]->integer;
    freeReplyObject(r);
    const char *pttl[] = {"PTTL", "herald:i:k a1"};
    r = cmd(c, 2, pttl, NULL);
    assert_true(r->integer > 59000 && r->integer <= 60000);
    freeReplyObject(r);
    /* The repeat: the first one's offset, epoch and time; the offset did not move. */
    const char *repeat[] = {"FCALL",     "herald_publish", "3", "herald:m:k", "herald:h:k",
                            "herald:i:k a1", "k", "two", "0", "0", "fedcba9876543210", "60000"};
    r = cmd(c, 12, repeat, NULL);
    assert_int_equal(r->element[0]->integer, 1);
    assert_string_equal(r->element[1]->str, "0123456789abcdef");
    assert_int_equal(r->element[2]->integer, t1);
    assert_int_equal(r->element[3]->integer, 1);
    freeReplyObject(r);
    const char *hget[] = {"HGET", "herald:m:k", "o"};
    r = cmd(c, 3, hget, NULL);
    assert_string_equal(r->str, "1");
    freeReplyObject(r);
    /* Window 0: published, nothing remembered. */
    const char *nowin[] = {"FCALL",     "herald_publish", "3", "herald:m:k", "herald:h:k",
                           "herald:i:k b2", "k", "three", "0", "0", "0123456789abcdef", "0"};
    r = cmd(c, 12, nowin, NULL);
    assert_int_equal(r->element[0]->integer, 2);
    assert_int_equal(r->element[3]->integer, 0);
    freeReplyObject(r);
    const char *exists[] = {"EXISTS", "herald:i:k b2"};
    r = cmd(c, 2, exists, NULL);
    assert_int_equal(r->integer, 0);
    freeReplyObject(r);
    redisFree(c);
    assert_int_equal(test_redis_stop(&redis), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gw_redis_schema_parse_table),
        cmocka_unit_test(test_gw_redis_schema_keys),
        cmocka_unit_test(test_gw_redis_schema_functions),
        cmocka_unit_test(test_gw_redis_schema_fence),
        cmocka_unit_test(test_gw_redis_schema_idempotency),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

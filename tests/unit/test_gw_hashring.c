/*
 * test_gw_hashring: channels spread over the servers (each of 3 gets a fair share of 30,000
 * names), every node agrees whatever order the addresses are listed in, and adding a server
 * moves only about its share of channels, each of them to the new server.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "gw_hashring.h"

#define N_CHANS 30000

static const char *const addrs[] = {"127.0.0.1:6379", "127.0.0.1:6380", "127.0.0.1:6381",
                                    "127.0.0.1:6382"};

static uint32_t owner(const gw_hashring_t *r, int i)
{
    char name[32];
    int len = snprintf(name, sizeof(name), "chat:room%d", i);
    return gw_hashring_lookup(r, name, (size_t)len);
}

static void test_gw_hashring_spread(void **state)
{
    (void)state;
    gw_hashring_t r;
    assert_int_equal(gw_hashring_init(&r, addrs, 3), 0);
    int count[3] = {0};
    for (int i = 0; i < N_CHANS; i++)
        count[owner(&r, i)]++;
    for (int s = 0; s < 3; s++)
        if (count[s] < N_CHANS * 25 / 100 || count[s] > N_CHANS * 42 / 100)
            fail_msg("server %d got %d of %d channels", s, count[s], N_CHANS);
    gw_hashring_deinit(&r);
}

static void test_gw_hashring_order_does_not_matter(void **state)
{
    (void)state;
    const char *const reversed[] = {addrs[2], addrs[1], addrs[0]};
    gw_hashring_t a;
    gw_hashring_t b;
    assert_int_equal(gw_hashring_init(&a, addrs, 3), 0);
    assert_int_equal(gw_hashring_init(&b, reversed, 3), 0);
    for (int i = 0; i < N_CHANS; i++) /* server i of a is server 2 - i of b */
        assert_int_equal(owner(&a, i), 2 - owner(&b, i));
    gw_hashring_deinit(&a);
    gw_hashring_deinit(&b);
}

static void test_gw_hashring_adding_a_server_moves_its_share(void **state)
{
    (void)state;
    gw_hashring_t three;
    gw_hashring_t four;
    assert_int_equal(gw_hashring_init(&three, addrs, 3), 0);
    assert_int_equal(gw_hashring_init(&four, addrs, 4), 0);
    int moved = 0;
    for (int i = 0; i < N_CHANS; i++) {
        uint32_t before = owner(&three, i);
        uint32_t after = owner(&four, i);
        if (before != after) {
            assert_int_equal(after, 3); /* only to the new server */
            moved++;
        }
    }
    if (moved < N_CHANS * 15 / 100 || moved > N_CHANS * 35 / 100)
        fail_msg("%d of %d channels moved", moved, N_CHANS);
    gw_hashring_deinit(&three);
    gw_hashring_deinit(&four);
}

static void test_gw_hashring_one_server(void **state)
{
    (void)state;
    gw_hashring_t r;
    assert_int_equal(gw_hashring_init(&r, addrs, 1), 0);
    for (int i = 0; i < 100; i++)
        assert_int_equal(owner(&r, i), 0);
    gw_hashring_deinit(&r);
    assert_int_equal(gw_hashring_init(&r, addrs, 0), -EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gw_hashring_spread),
        cmocka_unit_test(test_gw_hashring_order_does_not_matter),
        cmocka_unit_test(test_gw_hashring_adding_a_server_moves_its_share),
        cmocka_unit_test(test_gw_hashring_one_server),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

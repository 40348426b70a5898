/*
 * unit_pool.h - the fixture every cmocka test of the library uses: a fresh
 * APR pool per test, handed in as the test's state, destroyed after it.
 * Include after <cmocka.h> and <apr_pools.h>.
 */
#ifndef UNIT_POOL_H
#define UNIT_POOL_H

static int pool_setup(void **state)
{
    apr_pool_t *p;
    if (apr_pool_create(&p, NULL) != APR_SUCCESS)
        return -1;
    *state = p;
    return 0;
}

static int pool_teardown(void **state)
{
    apr_pool_destroy(*state);
    return 0;
}

#define TEST(f) cmocka_unit_test_setup_teardown(f, pool_setup, pool_teardown)

#endif

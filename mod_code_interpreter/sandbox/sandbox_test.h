/* sandbox_test.h - what the unit tests' provider saw (sandbox_test.c). */
#ifndef SANDBOX_TEST_H
#define SANDBOX_TEST_H

typedef struct ci_test_provider_log {
    int started, destroyed, runs, blocked, reaped;
    char last_reaped[64];
} ci_test_provider_log;

extern ci_test_provider_log ci_test_provider_record;

struct ci_sandbox_def;
/* Its own key api_base, as a tool of it has it. */
const char *ci_test_provider_api_base(const struct ci_sandbox_def *d);

#endif

#include "ci_secret_value.h"

int ci_secret_value_ok(const char *value, apr_size_t len)
{
    apr_size_t i;
    if (!value || len < 1 || len > CI_MAX_SECRET_VALUE)
        return 0;
    for (i = 0; i < len; i++) {
        unsigned char c = (unsigned char)value[i];
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return 0;
    }
    return 1;
}

/*
 * INCRBYFLOAT's arithmetic, in C because Redis computes it in `long double` (80-bit on x86-64)
 * and prints it with "%.17Lf": no Rust type has that precision, and the results differ from
 * f64's in the digits clients see (0.1 + 0.2 is "0.3" in Redis, 0.30000000000000004 in f64).
 * `parse` is Redis's string2ld and `format` its ld2string(LD_STR_HUMAN), from util.c.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Redis's MAX_LONG_DOUBLE_CHARS. */
#define MAX_CHARS (5 * 1024)

static int parse(const char *s, size_t len, long double *out) {
    char buf[MAX_CHARS];
    char *end;
    long double value;
    if (len == 0 || len >= sizeof(buf)) return 0;
    memcpy(buf, s, len);
    buf[len] = '\0';
    errno = 0;
    value = strtold(buf, &end);
    if (isspace((unsigned char)buf[0]) || end[0] != '\0' || (size_t)(end - buf) != len ||
        (errno == ERANGE && (value == HUGE_VALL || value == -HUGE_VALL || fpclassify(value) == FP_ZERO)) ||
        errno == EINVAL || isnan(value))
        return 0;
    *out = value;
    return 1;
}

static size_t format(long double value, char *buf, size_t cap) {
    int len = snprintf(buf, cap, "%.17Lf", value);
    if (len < 0 || (size_t)len + 1 > cap) return 0;
    if (strchr(buf, '.') != NULL) {
        char *p = buf + len - 1;
        while (*p == '0') { p--; len--; }
        if (*p == '.') len--;
    }
    if (len == 2 && buf[0] == '-' && buf[1] == '0') { buf[0] = '0'; len = 1; }
    return (size_t)len;
}

/* Whether `s` is a float Redis accepts. */
int cloak_ld_valid(const char *s, size_t len) {
    long double value;
    return parse(s, len, &value);
}

/*
 * current + increment into `out` (at least MAX_CHARS bytes), its length in `*written`.
 * Returns 0 on success, 1 if `current` is not a float, 2 if `increment` is not, 3 if the sum is
 * NaN or infinite, 4 if it does not print in MAX_CHARS.
 */
int cloak_ld_add(const char *current, size_t current_len, const char *increment,
                 size_t increment_len, char *out, size_t *written) {
    long double a, b, sum;
    if (!parse(current, current_len, &a)) return 1;
    if (!parse(increment, increment_len, &b)) return 2;
    sum = a + b;
    if (isnan(sum) || isinf(sum)) return 3;
    *written = format(sum, out, MAX_CHARS);
    return *written == 0 ? 4 : 0;
}

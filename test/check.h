/* check.h — the tiny test protocol every C test uses. Each check prints one line,
 * "PASS name" or "FAIL name: why", which test/run.sh counts; main returns zt_check_exit(). */
#ifndef ZT_CHECK_H
#define ZT_CHECK_H

#include <stdarg.h>
#include <stdio.h>

static int zt_checks_failed = 0, zt_checks_passed = 0;

/* check(cond, name, fmt, ...): records one named check; the message explains a failure. */
static inline int zt_check(int ok, const char *name, const char *fmt, ...) {
    if (ok) {
        printf("PASS %s\n", name);
        zt_checks_passed++;
    } else {
        printf("FAIL %s: ", name);
        va_list ap;
        va_start(ap, fmt);
        vprintf(fmt, ap);
        va_end(ap);
        printf("\n");
        zt_checks_failed++;
    }
    fflush(stdout);
    return ok;
}
#define CHECK(cond, name, ...) zt_check((cond), (name), __VA_ARGS__)

static inline int zt_check_exit(void) { return zt_checks_failed ? 1 : 0; }

#endif

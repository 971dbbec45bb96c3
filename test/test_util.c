/* test_util.c — util/util.h's arithmetic helpers that decisions rest on:
 *   - zt_settled_time (ratio auto's calibration passes): a slowed pass among agreeing ones moves
 *     nothing; the fastest 3 must agree within the tolerance to settle; otherwise the median of all. */
#include <math.h>

#include "check.h"
#include "util/util.h"

static int near(double a, double b) { return fabs(a - b) <= 1e-12 * fmax(1.0, fabs(b)); }

int main(void) {
    int settled = -1;
    /* the H200's fresh VM: one pass 10x slower (its memory grew under it) among four that agree; the mean
     * of the first 3, the old rule, was 4.03 */
    const double slowed[] = {10.0, 1.0, 1.1, 1.05, 1.02};
    double t = zt_settled_time(slowed, 5, 0.25, &settled);
    CHECK(settled == 1 && near(t, 1.02), "settled_time_ignores_a_slowed_pass", "%g settled %d", t, settled);
    const double mostly_slow[] = {9.0, 1.0, 8.0, 1.1, 7.5, 1.2, 9.5};
    t = zt_settled_time(mostly_slow, 7, 0.25, &settled);
    CHECK(settled == 1 && near(t, 1.1), "settled_time_three_fast_passes_settle", "%g settled %d", t, settled);
    const double spread[] = {4.0, 1.0, 3.0, 2.0};
    t = zt_settled_time(spread, 4, 0.25, &settled);
    CHECK(settled == 0 && near(t, 2.5), "settled_time_disagreeing_takes_the_median", "%g settled %d", t, settled);
    const double two[] = {2.0, 1.0};
    t = zt_settled_time(two, 2, 0.25, &settled);
    CHECK(settled == 0 && near(t, 1.5), "settled_time_fewer_than_3_not_settled", "%g settled %d", t, settled);
    const double one[] = {3.0};
    t = zt_settled_time(one, 1, 0.25, &settled);
    CHECK(settled == 0 && near(t, 3.0), "settled_time_one_sample", "%g settled %d", t, settled);
    const double edge[] = {1.25, 1.0, 1.2};
    t = zt_settled_time(edge, 3, 0.25, &settled);
    CHECK(settled == 1 && near(t, 1.2), "settled_time_tolerance_inclusive", "%g settled %d", t, settled);
    return zt_check_exit();
}

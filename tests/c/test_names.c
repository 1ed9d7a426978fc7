/*
 * test_names: the option-value names every front end takes (names.c) and
 * the limit a run is measured against (stk_measure_limit).
 */
#include "util.h"

#include <errno.h>

static void names(void) {
    for (int v = 0; v <= 2; v++) {
        CHECK(stk_order_parse(stk_order_name((stk_order)v)) == v);
        CHECK(stk_valid_parse(stk_valid_name((stk_valid)v)) == v);
        CHECK(stk_warm_up_parse(stk_warm_up_name((stk_warm_up)v)) == v);
    }
    for (int v = 0; v <= 1; v++) CHECK(stk_on_error_parse(stk_on_error_name((stk_on_error)v)) == v);
    for (int v = 0; v <= 3; v++) CHECK(stk_backend_parse(stk_backend_name((stk_backend)v)) == v);
    CHECK(stk_order_parse("block") == STK_ORDER_BLOCK);
    CHECK(stk_backend_parse("uring") == STK_BACKEND_URING);
    CHECK(stk_valid_parse("notnan") == STK_VALID_NOT_NAN);
    CHECK(stk_warm_up_parse("off") == STK_WARM_UP_OFF);
    CHECK(stk_on_error_parse("skip") == STK_ON_ERROR_SKIP);
    /* Unknown names, case and NULL are refused, never guessed. */
    CHECK(stk_order_parse("shuffle") == -EINVAL);
    CHECK(stk_order_parse("Block") == -EINVAL);
    CHECK(stk_order_parse(NULL) == -EINVAL);
    CHECK(stk_backend_parse("") == -EINVAL);
    CHECK(strcmp(stk_order_name((stk_order)7), "unknown") == 0);
}

static void limit(void) {
    stk_limit l;
    stk_measure_limit(NULL, &l);
    CHECK(l.bytes_per_s > 0 && l.resident == -1);
    CHECK(strstr(l.what, "memcpy") != NULL);
}

int main(void) {
    names();
    limit();
    return 0;
}

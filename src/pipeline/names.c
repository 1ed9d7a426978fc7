/*
 * names.c: the names of the loader's option values, one table per option,
 * shared by every front end (the command line and the Python package ask
 * here instead of keeping tables of their own).
 */
#include "../core/internal.h"

#include <errno.h>
#include <string.h>

typedef struct {
    const char *name;
    int value;
} named;

static int parse(const named *t, size_t n, const char *name) {
    for (size_t i = 0; name && i < n; i++)
        if (strcmp(t[i].name, name) == 0) return t[i].value;
    return -EINVAL;
}

static const char *name_of(const named *t, size_t n, int value) {
    for (size_t i = 0; i < n; i++)
        if (t[i].value == value) return t[i].name;
    return "unknown";
}

#define NAMES(type, fn, table)                                                     \
    const char *stk_##fn##_name(type v) {                                          \
        return name_of(table, sizeof table / sizeof *table, (int)v);               \
    }                                                                              \
    int stk_##fn##_parse(const char *name) {                                       \
        return parse(table, sizeof table / sizeof *table, name);                   \
    }

static const named orders[] = {{"sequential", STK_ORDER_SEQUENTIAL},
                               {"random", STK_ORDER_RANDOM},
                               {"block", STK_ORDER_BLOCK}};
static const named valids[] = {{"all", STK_VALID_ALL},
                               {"mask", STK_VALID_MASK},
                               {"notnan", STK_VALID_NOT_NAN},
                               {"finite", STK_VALID_FINITE},
                               {"some", STK_VALID_SOME},
                               {"range", STK_VALID_RANGE},
                               {"step", STK_VALID_STEP},
                               {"outside", STK_VALID_OUTSIDE}};
static const named warm_ups[] = {{"auto", STK_WARM_UP_AUTO},
                                 {"on", STK_WARM_UP_ON},
                                 {"off", STK_WARM_UP_OFF}};
static const named on_errors[] = {{"raise", STK_ON_ERROR_RAISE}, {"skip", STK_ON_ERROR_SKIP}};
/* "uring" is what the front ends take; stk_backend_name says "io_uring". */
static const named backends[] = {{"auto", STK_BACKEND_AUTO},
                                 {"uring", STK_BACKEND_URING},
                                 {"io_uring", STK_BACKEND_URING},
                                 {"pool", STK_BACKEND_POOL},
                                 {"mmap", STK_BACKEND_MMAP}};

NAMES(stk_order, order, orders)
NAMES(stk_valid, valid, valids)
NAMES(stk_warm_up, warm_up, warm_ups)
NAMES(stk_on_error, on_error, on_errors)

int stk_backend_parse(const char *name) {
    return parse(backends, sizeof backends / sizeof *backends, name);
}

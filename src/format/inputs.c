/*
 * inputs.c: the inputs of a pack one by one (stk_writer_options.
 * inputs_list), compared when a resume or a merge finds its inputs
 * changed, to name the one that did.
 */
#include "format.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct entry {
    const char *name, *size, *mtime, *hash; /* each ends at a tab or a newline */
    size_t name_len;
} entry;

static size_t field_len(const char *s) { return strcspn(s, "\t\n"); }

/* Splits `list` into entries (pointing into it); NULL when out of memory
 * or malformed. */
static entry *split(const char *list, size_t *n) {
    size_t lines = 0;
    for (const char *p = list; *p; p++) lines += *p == '\n';
    entry *e = stk__calloc(lines ? lines : 1, sizeof *e);
    if (!e) return NULL;
    size_t k = 0;
    for (const char *p = list; *p && k < lines;) {
        const char *f[4];
        f[0] = p;
        for (int j = 1; j < 4; j++) {
            const char *tab = f[j - 1] + field_len(f[j - 1]);
            if (*tab != '\t') {
                stk__free(e);
                return NULL;
            }
            f[j] = tab + 1;
        }
        e[k] = (entry){f[0], f[1], f[2], f[3], field_len(f[0])};
        const char *nl = strchr(f[3], '\n');
        if (!nl) break;
        p = nl + 1;
        k++;
    }
    *n = k;
    return e;
}

bool stk__inputs_list_valid(const char *list) {
    size_t n = 0;
    for (const char *p = list; *p; p++) {
        if (*p == '\n') n++;
        else if ((unsigned char)*p < 0x20 && *p != '\t') return false;
    }
    if (!*list || list[strlen(list) - 1] != '\n' || strlen(list) > ((size_t)64 << 20)) return false;
    size_t got = 0;
    entry *e = split(list, &got);
    stk__free(e);
    return e != NULL && got == n;
}

static bool same(const char *a, const char *b) {
    size_t n = field_len(a);
    return n == field_len(b) && memcmp(a, b, n) == 0;
}

static bool same_name(const entry *a, const entry *b) {
    return a->name_len == b->name_len && memcmp(a->name, b->name, a->name_len) == 0;
}

static ssize_t find(const entry *v, size_t n, size_t from, const entry *x) {
    for (size_t i = from; i < n; i++)
        if (same_name(&v[i], x)) return (ssize_t)i;
    return -1;
}

bool stk__inputs_diff(const char *was, const char *now, char *out, size_t cap) {
    if (!was || !now) return false;
    size_t na = 0, nb = 0;
    entry *a = split(was, &na), *b = split(now, &nb);
    bool found = false;
    if (!a || !b) goto out;
    for (size_t i = 0, j = 0; i < na || j < nb;) {
        if (i < na && j < nb && same_name(&a[i], &b[j])) {
            const entry *x = &a[i], *y = &b[j];
            int nl = (int)STK__MIN(x->name_len, 400);
            if (!same(x->size, y->size))
                snprintf(out, cap, "%.*s changed (its size, %.*s then %.*s bytes)", nl, x->name,
                         (int)field_len(x->size), x->size, (int)field_len(y->size), y->size);
            else if (!same(x->mtime, y->mtime))
                snprintf(out, cap, "%.*s changed (its modification time)", nl, x->name);
            else if (!same(x->hash, y->hash))
                snprintf(out, cap,
                         "%.*s changed (its first or last bytes, with the same size and time)",
                         nl, x->name);
            else {
                i++, j++;
                continue;
            }
            found = true;
            break;
        }
        /* Names part ways: the old one further on means this one was
         * added; else the old one was removed. */
        const entry *x = i < na ? &a[i] : NULL, *y = j < nb ? &b[j] : NULL;
        if (y && (!x || find(a, na, i, y) < 0)) {
            snprintf(out, cap, "%.*s added", (int)STK__MIN(y->name_len, 400), y->name);
        } else {
            snprintf(out, cap, "%.*s %s", (int)STK__MIN(x->name_len, 400), x->name,
                     y && find(b, nb, j, x) >= 0 ? "moved in the order" : "removed");
        }
        found = true;
        break;
    }
out:
    stk__free(a);
    stk__free(b);
    return found;
}

/*
 * mem.c: how much memory the page cache can give this process, for the
 * loader's choice of bringing a whole dataset in before its first epoch.
 *
 * Two limits apply.  The machine's: MemAvailable in /proc/meminfo, which
 * counts free memory plus what the kernel can reclaim (clean page cache
 * among it).  The control group's: under cgroup v2 a group's memory.max
 * caps everything charged to it, page cache included, and a limit set on
 * any ancestor applies too.  Inside a group only anonymous memory is fixed;
 * the group's own page cache is reclaimed to make room, so its room is
 * memory.max less its anonymous and kernel memory.
 */
#define _GNU_SOURCE
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The first number after `key` in the text file `path`, in bytes when
 * `kib` (/proc/meminfo counts kB); false when absent or unreadable. */
static bool read_key(const char *path, const char *key, bool kib, uint64_t *out) {
    FILE *f = fopen(path, "re");
    if (!f) return false;
    char line[256];
    size_t klen = strlen(key);
    bool found = false;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, key, klen) != 0) continue;
        char *end;
        unsigned long long v = strtoull(line + klen, &end, 10);
        if (end == line + klen) break;
        *out = kib ? (uint64_t)v * 1024 : (uint64_t)v;
        found = true;
        break;
    }
    fclose(f);
    return found;
}

/* One number from a one-line cgroup file ("max" gives UINT64_MAX). */
static bool read_value(const char *path, uint64_t *out) {
    FILE *f = fopen(path, "re");
    if (!f) return false;
    char buf[64];
    bool ok = fgets(buf, sizeof buf, f) != NULL;
    fclose(f);
    if (!ok) return false;
    if (strncmp(buf, "max", 3) == 0) {
        *out = UINT64_MAX;
        return true;
    }
    char *end;
    unsigned long long v = strtoull(buf, &end, 10);
    if (end == buf) return false;
    *out = (uint64_t)v;
    return true;
}

/* The room left under the tightest memory.max of this process's cgroup v2
 * group and its ancestors; UINT64_MAX when none is set (or no cgroup v2). */
static uint64_t cgroup_room(void) {
    FILE *f = fopen("/proc/self/cgroup", "re");
    if (!f) return UINT64_MAX;
    char line[4096], path[4096] = "";
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "0::", 3) == 0) {
            snprintf(path, sizeof path, "%s", line + 3);
            path[strcspn(path, "\n")] = 0;
            break;
        }
    fclose(f);
    if (!path[0]) return UINT64_MAX;
    uint64_t room = UINT64_MAX;
    for (;;) {
        char file[4200];
        uint64_t max, anon = 0, kernel = 0;
        snprintf(file, sizeof file, "/sys/fs/cgroup%s/memory.max", path);
        if (read_value(file, &max) && max != UINT64_MAX) {
            snprintf(file, sizeof file, "/sys/fs/cgroup%s/memory.stat", path);
            read_key(file, "anon ", false, &anon);
            read_key(file, "kernel ", false, &kernel);
            uint64_t fixed = anon + kernel;
            room = STK__MIN(room, max > fixed ? max - fixed : 0);
        }
        char *slash = strrchr(path, '/');
        if (!slash || slash == path) {
            if (!path[1]) break;
            path[1] = 0; /* the root group: "/" */
            continue;
        }
        *slash = 0;
    }
    return room;
}

uint64_t stk__mem_room(void) {
    uint64_t avail;
    if (!read_key("/proc/meminfo", "MemAvailable:", true, &avail)) avail = 0;
    return STK__MIN(avail, cgroup_room());
}

/*
 * mem.c: how much memory the page cache can give this process, for the
 * loader's choice of bringing a whole dataset in before its first epoch.
 *
 * Two limits apply.  The machine's: MemAvailable in /proc/meminfo, which
 * counts free memory plus what the kernel can reclaim (clean page cache
 * among it).  The control group's: a group's memory limit caps everything
 * charged to it, page cache included, and a limit set on an ancestor
 * applies too.  Inside a group only anonymous (and kernel) memory is fixed;
 * the group's own page cache is reclaimed to make room, so the room is the
 * limit less that.
 *
 *   cgroup v2: the line "0::PATH" of /proc/self/cgroup; for PATH and each
 *     ancestor, memory.max ("max": none) less memory.stat's anon and kernel.
 *   cgroup v1: the line "N:...memory...:PATH"; memory.stat's
 *     hierarchical_memory_limit (the tightest of the group and its
 *     ancestors) less total_rss.  v1 calls "no limit" a huge number.
 */
#define _GNU_SOURCE
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The first number after `key` at the start of a line of the text file
 * `path`, times `scale`; false when absent or unreadable. */
static bool read_key(const char *path, const char *key, uint64_t scale, uint64_t *out) {
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
        *out = (uint64_t)v * scale;
        found = true;
        break;
    }
    fclose(f);
    return found;
}

/* One number from a one-line file ("max" gives UINT64_MAX). */
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

/* Room under the limits of v2 group `path` (starting with '/') and its
 * ancestors, under the v2 hierarchy mounted at `root`. */
static uint64_t room_v2(const char *root, char *path) {
    uint64_t room = UINT64_MAX;
    for (;;) {
        char file[4400];
        uint64_t max, anon = 0, kernel = 0;
        snprintf(file, sizeof file, "%s%s/memory.max", root, path);
        if (read_value(file, &max) && max != UINT64_MAX) {
            snprintf(file, sizeof file, "%s%s/memory.stat", root, path);
            read_key(file, "anon ", 1, &anon);
            read_key(file, "kernel ", 1, &kernel);
            room = STK__MIN(room, max > anon + kernel ? max - anon - kernel : 0);
        }
        char *slash = strrchr(path, '/');
        if (!slash || (slash == path && !path[1])) break;
        if (slash == path) path[1] = 0; /* the root group, "/" */
        else *slash = 0;
    }
    return room;
}

/* Room under the v1 memory controller's limit for group `path`, under the
 * v1 memory hierarchy mounted at `root`. */
static uint64_t room_v1(const char *root, const char *path) {
    char file[4400];
    uint64_t limit, rss = 0;
    snprintf(file, sizeof file, "%s%s/memory.stat", root, path);
    if (!read_key(file, "hierarchical_memory_limit ", 1, &limit)) {
        snprintf(file, sizeof file, "%s%s/memory.limit_in_bytes", root, path);
        if (!read_value(file, &limit)) return UINT64_MAX;
    }
    if (limit >= (UINT64_C(1) << 62)) return UINT64_MAX; /* v1's "unlimited" */
    snprintf(file, sizeof file, "%s%s/memory.stat", root, path);
    if (!read_key(file, "total_rss ", 1, &rss)) read_key(file, "rss ", 1, &rss);
    return limit > rss ? limit - rss : 0;
}

uint64_t stk__cgroup_room(const char *self_cgroup, const char *v2_root, const char *v1_root) {
    FILE *f = fopen(self_cgroup, "re");
    if (!f) return UINT64_MAX;
    char line[4096];
    uint64_t room = UINT64_MAX;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2 || c2[1] != '/') continue;
        char path[4096];
        snprintf(path, sizeof path, "%s", c2 + 1);
        *c1 = 0;
        *c2 = 0;
        if (strcmp(line, "0") == 0 && c1[1] == 0) {
            uint64_t r = room_v2(v2_root, path); /* (it shortens path) */
            room = STK__MIN(room, r);
        } else {
            /* v1: the controllers are a comma-separated list. */
            char *save = NULL;
            for (char *tok = strtok_r(c1 + 1, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
                if (strcmp(tok, "memory") == 0) {
                    uint64_t r = room_v1(v1_root, path);
                    room = STK__MIN(room, r);
                }
        }
    }
    fclose(f);
    return room;
}

uint64_t stk__mem_room(void) {
    uint64_t avail;
    if (!read_key("/proc/meminfo", "MemAvailable:", 1024, &avail)) avail = 0;
    /* cgroup v2 is mounted at /sys/fs/cgroup, or at /sys/fs/cgroup/unified
     * beside v1 controllers (a hybrid setup). */
    const char *v2 = "/sys/fs/cgroup";
    FILE *probe = fopen("/sys/fs/cgroup/unified/cgroup.controllers", "re");
    if (probe) {
        fclose(probe);
        v2 = "/sys/fs/cgroup/unified";
    }
    return STK__MIN(avail, stk__cgroup_room("/proc/self/cgroup", v2, "/sys/fs/cgroup/memory"));
}

/*
 * test_mem.c: the room the page cache may take, as the warm-up judges it:
 * the tightest memory limit of the process's control group and its
 * ancestors, less their anonymous memory, for cgroup v2 and v1 (read from
 * fake hierarchies written here), and MemAvailable on this machine.
 */
#include "util.h"

#include "core/internal.h"

#include <sys/stat.h>

static char root[4096];

static void put(const char *rel, const char *text) {
    char path[8192];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    /* Make the parent directories. */
    for (char *p = path + strlen(root) + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(path, 0755);
            *p = '/';
        }
    test_write_file(path, text, strlen(text));
}

static uint64_t room(const char *self) {
    char s[8192], v2[8192], v1[8192];
    put("proc-cgroup", self);
    snprintf(s, sizeof s, "%s/proc-cgroup", root);
    snprintf(v2, sizeof v2, "%s/v2", root);
    snprintf(v1, sizeof v1, "%s/v1", root);
    return stk__cgroup_room(s, v2, v1);
}

int main(void) {
    snprintf(root, sizeof root, "%s", test_dir("mem"));
    mkdir(root, 0755);

    /* v2: the group a/b has no limit; its parent a allows 1000000 bytes, of
     * which 100000 are anonymous and 50000 kernel memory. */
    put("v2/a/memory.max", "1000000\n");
    put("v2/a/memory.stat", "anon 100000\nfile 700000\nkernel 50000\n");
    put("v2/a/b/memory.max", "max\n");
    put("v2/a/b/memory.stat", "anon 10\nfile 20\n");
    CHECK(room("0::/a/b\n") == 850000);
    /* A tighter limit below wins; a full group has no room. */
    put("v2/a/b/memory.max", "400000\n");
    CHECK(room("0::/a/b\n") == 400000 - 10);
    put("v2/a/b/memory.stat", "anon 500000\n");
    CHECK(room("0::/a/b\n") == 0);
    /* The root group and no limit anywhere: none applies. */
    CHECK(room("0::/\n") == UINT64_MAX);
    CHECK(room("0::/c\n") == UINT64_MAX);

    /* v1: the memory controller's line; hierarchical_memory_limit already
     * takes the ancestors into account; total_rss counts the children. */
    put("v1/p/q/memory.stat", "cache 5000\nrss 100\nhierarchical_memory_limit 600000\n"
                              "total_cache 9000\ntotal_rss 200000\n");
    CHECK(room("4:memory:/p/q\n3:cpuset:/\n") == 400000);
    CHECK(room("7:cpu,memory:/p/q\n") == 400000);
    /* v1's "unlimited" is a huge number. */
    put("v1/p/q/memory.stat", "hierarchical_memory_limit 9223372036854771712\ntotal_rss 1\n");
    CHECK(room("4:memory:/p/q\n") == UINT64_MAX);
    /* Both at once (a hybrid machine): the tighter. */
    put("v1/p/q/memory.stat", "hierarchical_memory_limit 300000\ntotal_rss 0\n");
    CHECK(room("4:memory:/p/q\n0::/a/b\n") == 0);
    put("v2/a/b/memory.stat", "anon 0\n");
    CHECK(room("4:memory:/p/q\n0::/a/b\n") == 300000);
    /* Unreadable or malformed: no limit rather than a made-up one. */
    CHECK(room("garbage\n") == UINT64_MAX);
    CHECK(room("0::/no/such/group\n") == UINT64_MAX);
    char missing[8192];
    snprintf(missing, sizeof missing, "%s/none", root);
    CHECK(stk__cgroup_room(missing, root, root) == UINT64_MAX);

    /* This machine: some room, no more than it has. */
    uint64_t r = stk__mem_room();
    CHECK(r > 0);
    test_rmrf(root);
    return 0;
}

#include "util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

int stk_test_failures;

void test_rmrf(const char *path) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd) != 0) {
        fprintf(stderr, "cannot remove %s\n", path);
        exit(1);
    }
}

const char *test_dir(const char *name) {
    static char buf[8][4096];
    static int k;
    const char *base = getenv("STK_TEST_TMP");
    if (!base) base = "/tmp/stoker-tests";
    mkdir(base, 0755);
    char *out = buf[k++ % 8];
    snprintf(out, 4096, "%s/%s-%ld", base, name, (long)getpid());
    test_rmrf(out);
    return out;
}

void test_fill(void *buf, size_t n, uint64_t seed) {
    uint8_t *p = buf;
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = (uint8_t)x;
    }
}

void test_poke(const char *path, uint64_t off, const void *bytes, size_t n) {
    int fd = open(path, O_WRONLY);
    CHECK(fd >= 0);
    CHECK(pwrite(fd, bytes, n, (off_t)off) == (ssize_t)n);
    close(fd);
}

void test_peek(const char *path, uint64_t off, void *bytes, size_t n) {
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    CHECK(pread(fd, bytes, n, (off_t)off) == (ssize_t)n);
    close(fd);
}

void test_flip(const char *path, uint64_t off, uint8_t mask) {
    uint8_t b;
    test_peek(path, off, &b, 1);
    b ^= mask;
    test_poke(path, off, &b, 1);
}

void test_truncate(const char *path, uint64_t size) { CHECK(truncate(path, (off_t)size) == 0); }

uint64_t test_file_size(const char *path) {
    struct stat st;
    CHECK(stat(path, &st) == 0);
    return (uint64_t)st.st_size;
}

char *test_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    CHECK(fseek(f, 0, SEEK_END) == 0);
    long n = ftell(f);
    CHECK(n >= 0);
    rewind(f);
    char *buf = malloc((size_t)n + 1);
    CHECK(buf != NULL);
    CHECK(fread(buf, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    buf[n] = '\0';
    if (len) *len = (size_t)n;
    return buf;
}

void test_write_file(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    CHECK(fwrite(data, 1, len, f) == len);
    CHECK(fclose(f) == 0);
}

void test_copy_dir(const char *from, const char *to) {
    char cmd[8400];
    snprintf(cmd, sizeof cmd, "cp -a '%s' '%s'", from, to);
    CHECK(system(cmd) == 0);
}

int test_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

int test_names_record(const char *msg, uint64_t rec) {
    char want[48];
    snprintf(want, sizeof want, "record %llu", (unsigned long long)rec);
    size_t n = strlen(want);
    for (const char *p = strstr(msg, want); p; p = strstr(p + 1, want))
        if (p[n] < '0' || p[n] > '9') return 1;
    return 0;
}

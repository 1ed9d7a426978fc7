/*
 * push.c: a local dataset uploaded to an S3 prefix (`stoker push`): checked
 * first, then every shard (one PUT each, or a multipart upload above the
 * part size), many at once, and the manifest last, so that a reader never
 * finds a manifest whose shards are not all there.
 */
#define _GNU_SOURCE
#include "remote.h"
#include "../format/format.h"

#include "curl.h"
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* S3's limits on multipart uploads. */
#define MIN_PART (5ull << 20)
#define MAX_PARTS 10000

typedef struct pusher {
    stk__url url;
    stk__aws aws;
    bool have_aws;
    stk__http *http;
    void (*progress)(void *ctx, uint64_t done, uint64_t total);
    void *ctx;
    uint64_t done, total;
} pusher;

static void advance(pusher *p, uint64_t bytes) {
    p->done += bytes;
    if (p->progress) p->progress(p->ctx, p->done, p->total);
}

/* The URL of object `name` with the query of a multipart upload: no id
 * starts one (?uploads); an id and a part number sends a part; an id alone
 * completes or aborts it. */
static char *object_query(const pusher *p, const char *name, const char *id, int part) {
    char *base = stk__url_object(&p->url, &p->aws, name);
    char *esc = id ? curl_easy_escape(NULL, id, 0) : NULL;
    char q[600];
    char *out = NULL;
    if (base && (!id || esc)) {
        /* "uploads=": curl 7.88 signs a bare "uploads" without the "=" that
         * SigV4's canonical query has, and the signature fails. */
        if (!id) snprintf(q, sizeof q, "?uploads=");
        else if (part) snprintf(q, sizeof q, "?partNumber=%d&uploadId=%s", part, esc);
        else snprintf(q, sizeof q, "?uploadId=%s", esc);
        out = stk__concat(base, "", q);
    }
    curl_free(esc);
    stk__free(base);
    return out;
}

/* Runs one request with a body of text (or none), its answer in f->mem. */
static int request(pusher *p, stk__fetch *f, stk_error *err) {
    f->fd = -1;
    int rc = stk__http_run(p->http, f, 1, err);
    /* A 200 can carry an error (CompleteMultipartUpload does). */
    if (rc == 0 && f->mem && strstr((char *)f->mem, "<Error>")) {
        char code[64];
        stk__xml_element((char *)f->mem, "Code", code, sizeof code);
        rc = stk__err(err, -EIO, "%s: the server answered with an error: %s", f->what,
                      code[0] ? code : "(no code)");
    }
    return rc;
}

/* Uploads `path` as object `name` in parts: create, every part at once,
 * complete; aborted on failure, so that no parts are left behind. */
static int multipart(pusher *p, const char *name, int fd, uint64_t size,
                     uint64_t part, stk_error *err) {
    char *what = stk__concat(p->url.text, "/", name);
    char *u = object_query(p, name, NULL, 0);
    stk__fetch f;
    memset(&f, 0, sizeof f);
    f.url = u;
    f.what = what;
    f.post = "";
    int rc = u && what ? request(p, &f, err) : stk__err(err, -ENOMEM, "out of memory");
    stk__free(u);
    char id[512] = "";
    if (rc == 0) {
        stk__xml_element(f.mem ? (char *)f.mem : "", "UploadId", id, sizeof id);
        if (!id[0])
            rc = stk__err(err, -EIO, "%s: the server gave no UploadId for a multipart upload",
                          what);
    }
    stk__free(f.mem);
    uint64_t n = (size + part - 1) / part;
    stk__fetch *parts = rc == 0 ? stk__calloc(n, sizeof *parts) : NULL;
    char **urls = rc == 0 ? stk__calloc(n, sizeof *urls) : NULL;
    if (rc == 0 && (!parts || !urls)) rc = stk__err(err, -ENOMEM, "out of memory");
    for (uint64_t k = 0; rc == 0 && k < n; k++) {
        urls[k] = object_query(p, name, id, (int)k + 1);
        if (!urls[k]) {
            rc = stk__err(err, -ENOMEM, "out of memory");
            break;
        }
        parts[k] = (stk__fetch){.url = urls[k], .what = what, .fd = -1, .put = true,
                                .up_fd = fd, .up_off = k * part,
                                .up_len = STK__MIN(part, size - k * part)};
    }
    if (rc == 0) rc = stk__http_run(p->http, parts, n, err);
    /* <CompleteMultipartUpload> with each part's number and ETag. */
    size_t cap = 128 + (size_t)n * 200;
    char *body = rc == 0 ? stk__malloc(cap) : NULL;
    if (rc == 0 && !body) rc = stk__err(err, -ENOMEM, "out of memory");
    if (rc == 0) {
        size_t len = (size_t)snprintf(body, cap, "<CompleteMultipartUpload>");
        for (uint64_t k = 0; k < n && rc == 0; k++) {
            if (!parts[k].etag[0])
                rc = stk__err(err, -EIO, "%s: part %" PRIu64 " was stored without an ETag", what,
                              k + 1);
            len += (size_t)snprintf(body + len, cap - len,
                                    "<Part><PartNumber>%" PRIu64 "</PartNumber><ETag>%s</ETag>"
                                    "</Part>",
                                    k + 1, parts[k].etag);
        }
        snprintf(body + len, cap - len, "</CompleteMultipartUpload>");
    }
    if (rc == 0) {
        u = object_query(p, name, id, 0);
        memset(&f, 0, sizeof f);
        f.url = u;
        f.what = what;
        f.post = body;
        rc = u ? request(p, &f, err) : stk__err(err, -ENOMEM, "out of memory");
        stk__free(f.mem);
        stk__free(u);
    }
    if (rc && id[0]) {
        /* Parts left would be billed and never seen: abort the upload. */
        u = object_query(p, name, id, 0);
        memset(&f, 0, sizeof f);
        f.url = u;
        f.what = what;
        f.method = "DELETE";
        stk_error e2;
        if (u) request(p, &f, &e2);
        stk__free(f.mem);
        stk__free(u);
    }
    for (uint64_t k = 0; urls && k < n; k++) stk__free(urls[k]);
    for (uint64_t k = 0; parts && k < n; k++) stk__free(parts[k].mem);
    stk__free(urls);
    stk__free(parts);
    stk__free(body);
    stk__free(what);
    return rc;
}

/* Uploads files names[0..n) of `dir`, many at once: those up to `part`
 * bytes with one PUT each, larger ones in parts. */
static int upload(pusher *p, const char *dir, char **names, size_t n, uint64_t part,
                  stk_error *err) {
    stk__fetch *f = stk__calloc(n ? n : 1, sizeof *f);
    int *fds = stk__calloc(n ? n : 1, sizeof *fds);
    char **urls = stk__calloc(n ? n : 1, sizeof *urls), **whats = stk__calloc(n ? n : 1,
                                                                                sizeof *whats);
    int rc = f && fds && urls && whats ? 0 : stk__err(err, -ENOMEM, "out of memory");
    size_t nf = 0;
    uint64_t small = 0;
    for (size_t i = 0; fds && i < n; i++) fds[i] = -1;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        char *path = stk__path_join(dir, names[i]);
        int fd = path ? stk__open(path, O_RDONLY, 0) : -ENOMEM;
        struct stat st;
        if (fd < 0) rc = stk__err(err, fd, "%s: %s", path ? path : dir, stk_strerror(fd));
        else if (fstat(fd, &st) != 0) rc = stk__err(err, -errno, "%s: %s", path, strerror(errno));
        if (fd >= 0) fds[i] = fd;
        if (rc == 0 && (uint64_t)st.st_size > part) {
            uint64_t pp = STK__MAX(part, ((uint64_t)st.st_size + MAX_PARTS - 1) / MAX_PARTS);
            rc = multipart(p, names[i], fd, (uint64_t)st.st_size, pp, err);
            if (rc == 0) advance(p, (uint64_t)st.st_size);
        } else if (rc == 0) {
            urls[nf] = stk__url_object(&p->url, &p->aws, names[i]);
            whats[nf] = stk__concat(p->url.text, "/", names[i]);
            if (!urls[nf] || !whats[nf]) rc = stk__err(err, -ENOMEM, "out of memory");
            f[nf] = (stk__fetch){.url = urls[nf], .what = whats[nf], .fd = -1, .put = true,
                                 .up_fd = fd, .up_len = (uint64_t)st.st_size};
            small += (uint64_t)st.st_size;
            nf++;
        }
        stk__free(path);
    }
    if (rc == 0) rc = stk__http_run(p->http, f, nf, err);
    if (rc == 0) advance(p, small);
    for (size_t i = 0; i < nf; i++) {
        stk__free(f[i].mem);
        stk__free(urls[i]);
        stk__free(whats[i]);
    }
    for (size_t i = 0; fds && i < n; i++)
        if (fds[i] >= 0) close(fds[i]);
    stk__free(f);
    stk__free(fds);
    stk__free(urls);
    stk__free(whats);
    return rc;
}

/* Whether a dataset is already at the destination (its manifest answers). */
static int occupied(pusher *p, bool *yes, stk_error *err) {
    *yes = false;
    char *u = stk__url_object(&p->url, &p->aws, STK__MANIFEST);
    if (!u) return stk__err(err, -ENOMEM, "out of memory");
    stk__fetch f;
    memset(&f, 0, sizeof f);
    f.url = u;
    f.what = u;
    f.head = true;
    f.fd = -1;
    stk_error e2;
    int rc = stk__http_run(p->http, &f, 1, &e2);
    if (rc == 0) *yes = true;
    else if (rc != -ENOENT) {
        if (err) *err = e2;
    } else rc = 0;
    stk__free(u);
    return rc;
}

int stk_dataset_push(const char *dir, const char *url, int replace,
                     void (*progress)(void *ctx, uint64_t done, uint64_t total), void *ctx,
                     stk_error *err) {
    if (!dir || !url) return stk__err(err, -EINVAL, "stk_dataset_push: NULL argument");
    pusher p;
    memset(&p, 0, sizeof p);
    p.progress = progress;
    p.ctx = ctx;
    stk__manifest m;
    memset(&m, 0, sizeof m);
    char *text = NULL, *mpath = stk__path_join(dir, STK__MANIFEST);
    size_t len = 0;
    int rc = stk__url_parse(url, &p.url, err);
    if (rc) {
        stk__free(mpath);
        return rc;
    }
    if (p.url.scheme != STK__URL_S3) {
        rc = stk__err(err, -EINVAL,
                      "%s: pushing needs an S3 URL (s3://bucket/prefix); plain HTTP servers "
                      "have no standard way to receive files",
                      url);
        goto out;
    }
    /* The dataset is checked whole before anything is sent: a damaged
     * shard in the store would fail every reader. */
    if (!mpath) rc = stk__err(err, -ENOMEM, "out of memory");
    else if ((rc = stk__read_file(mpath, &text, &len)))
        stk__err(err, rc, "%s: %s", mpath, stk_strerror(rc));
    if (rc == 0) rc = stk__manifest_parse(text, len, mpath, &m, err);
    if (rc == 0 && m.is_part)
        rc = stk__err(err, STK_EINCOMPLETE, "%s: is part %u of %u; merge the parts first", dir,
                      m.part_index, m.part_count);
    for (size_t i = 0; rc == 0 && i < m.nshards; i++) {
        char *sp = stk__path_join(dir, m.shards[i].file);
        rc = sp ? stk__shard_check(sp, &m, i, err) : stk__err(err, -ENOMEM, "out of memory");
        stk__free(sp);
        if (rc == 0) p.total += m.shards[i].bytes;
    }
    p.total += len;
    if (rc) goto out;
    if ((rc = stk__aws_load(&p.aws, err))) goto out;
    p.have_aws = true;
    if ((rc = stk__http_new(&p.url, &p.aws, &p.http, err))) goto out;
    bool there = false;
    if ((rc = occupied(&p, &there, err))) goto out;
    if (there && !replace) {
        rc = stk__err(err, -EEXIST,
                      "%s: a dataset is already there; push to a new prefix (readers of the "
                      "old one keep working), or replace it (readers that have it open will "
                      "fail with a changed-object error)",
                      url);
        goto out;
    }
    uint64_t part = STK__MAX(stk__http_part_bytes(), MIN_PART);
    char **names = stk__calloc(m.nshards ? m.nshards : 1, sizeof *names);
    if (!names) {
        rc = stk__err(err, -ENOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < m.nshards; i++) names[i] = m.shards[i].file;
    rc = upload(&p, dir, names, m.nshards, part, err);
    stk__free(names);
    /* The manifest last: until it is there, there is no dataset. */
    char *mname = (char *)STK__MANIFEST;
    if (rc == 0) rc = upload(&p, dir, &mname, 1, part, err);
out:
    stk__free(text);
    stk__free(mpath);
    stk__manifest_clear(&m);
    stk__http_free(p.http);
    if (p.have_aws) stk__aws_free(&p.aws);
    stk__url_free(&p.url);
    return rc;
}

int stk_push_files(const char *dir, const char *const *names, size_t n, const char *url,
                   stk_error *err) {
    if (!dir || (!names && n) || !url) return stk__err(err, -EINVAL, "stk_push_files: NULL argument");
    pusher p;
    memset(&p, 0, sizeof p);
    int rc = stk__url_parse(url, &p.url, err);
    if (rc) return rc;
    if (p.url.scheme != STK__URL_S3)
        rc = stk__err(err, -EINVAL, "%s: uploading needs an S3 URL (s3://bucket/prefix)", url);
    if (rc == 0 && (rc = stk__aws_load(&p.aws, err)) == 0) p.have_aws = true;
    if (rc == 0) rc = stk__http_new(&p.url, &p.aws, &p.http, err);
    if (rc == 0)
        rc = upload(&p, dir, (char **)names, n, STK__MAX(stk__http_part_bytes(), MIN_PART), err);
    stk__http_free(p.http);
    if (p.have_aws) stk__aws_free(&p.aws);
    stk__url_free(&p.url);
    return rc;
}

int stk_delete_objects(const char *url, const char *const *names, size_t n, stk_error *err) {
    if (!url || (!names && n)) return stk__err(err, -EINVAL, "stk_delete_objects: NULL argument");
    pusher p;
    memset(&p, 0, sizeof p);
    int rc = stk__url_parse(url, &p.url, err);
    if (rc) return rc;
    if (p.url.scheme != STK__URL_S3)
        rc = stk__err(err, -EINVAL, "%s: deleting needs an S3 URL (s3://bucket/prefix)", url);
    if (rc == 0 && (rc = stk__aws_load(&p.aws, err)) == 0) p.have_aws = true;
    if (rc == 0) rc = stk__http_new(&p.url, &p.aws, &p.http, err);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        stk__fetch f;
        memset(&f, 0, sizeof f);
        char *u = stk__url_object(&p.url, &p.aws, names[i]);
        char *what = stk__concat(p.url.text, "/", names[i]);
        if (!u || !what) rc = stk__err(err, -ENOMEM, "out of memory");
        f.url = u;
        f.what = what;
        f.method = "DELETE";
        if (rc == 0) rc = request(&p, &f, err);
        if (rc == -ENOENT) rc = 0; /* gone already */
        stk__free(f.mem);
        stk__free(u);
        stk__free(what);
    }
    stk__http_free(p.http);
    if (p.have_aws) stk__aws_free(&p.aws);
    stk__url_free(&p.url);
    return rc;
}

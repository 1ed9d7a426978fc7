/*
 * creds.c: what signs and routes S3 requests, found as the AWS CLI finds it
 * (remote.h says the order): the environment, then a profile of the shared
 * credentials and config files, which are INI files read here.
 */
#define _GNU_SOURCE
#include "remote.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

/* The keys of a profile that stoker uses; the others are ignored. */
enum { K_ID, K_SECRET, K_TOKEN, K_REGION, K_ENDPOINT, K_N };
static const char *const key_names[K_N] = {"aws_access_key_id", "aws_secret_access_key",
                                           "aws_session_token", "region", "endpoint_url"};

typedef struct {
    char *v[K_N]; /* from stk__malloc; NULL when absent */
} profile_keys;

static void keys_free(profile_keys *k) {
    for (int i = 0; i < K_N; i++) stk__free(k->v[i]);
    memset(k, 0, sizeof *k);
}

static const char *env(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

static int oom(stk_error *err) { return stk__err(err, -ENOMEM, "out of memory"); }

static void clear_keys(stk__aws *a) {
    stk__free(a->access_key);
    stk__free(a->secret_key);
    stk__free(a->session_token);
    a->access_key = a->secret_key = a->session_token = NULL;
}

void stk__aws_free(stk__aws *a) {
    if (!a) return;
    clear_keys(a);
    stk__free(a->region);
    stk__free(a->endpoint);
    stk__free(a->profile);
    stk__free(a->creds_file);
    memset(a, 0, sizeof *a);
}

static char *trim(char *s) {
    while (*s == ' ' || *s == '\t') s++;
    char *e = s + strlen(s);
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r')) *--e = 0;
    return s;
}

/* Whether section header `name` is the profile's: "[NAME]" in the
 * credentials file; "[profile NAME]" in the config file, where the default
 * profile is "[default]" (or "[profile default]"). */
static bool section_is(const char *name, bool config, const char *profile) {
    if (!config) return strcmp(name, profile) == 0;
    if (strcmp(profile, "default") == 0 && strcmp(name, "default") == 0) return true;
    if (strncmp(name, "profile", 7) != 0 || (name[7] != ' ' && name[7] != '\t')) return false;
    const char *p = name + 7;
    while (*p == ' ' || *p == '\t') p++;
    return strcmp(p, profile) == 0;
}

/* Reads the profile's keys from INI file `path` into *k, as Python's
 * configparser (which the AWS CLI uses) reads them: "key = value" or
 * "key: value", keys in any case, whole-line '#' and ';' comments, and a
 * line indented deeper than the key before it continuing that key's value
 * (a nested block such as "s3 =", ignored here).  An absent file gives no
 * keys; one that exists but cannot be read is an error naming it. */
static int ini_read(const char *path, bool config, const char *profile, profile_keys *k,
                    stk_error *err) {
    char *text = NULL;
    size_t len = 0;
    int rc = stk__read_file(path, &text, &len);
    if (rc == -ENOENT || rc == -ENOTDIR) return 0;
    if (rc == -ENOMEM) return oom(err);
    if (rc) return stk__err(err, rc, "%s: %s", path, stk_strerror(rc));
    bool in = false;
    long key_indent = -1; /* indent of the last key line; -1 after a header */
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        long indent = (long)strspn(line, " \t");
        char *p = trim(line);
        if (!*p || *p == '#' || *p == ';') continue;
        if (key_indent >= 0 && indent > key_indent) continue; /* a continuation */
        if (*p == '[') {
            char *close = strrchr(p, ']');
            if (!close) continue;
            *close = 0;
            in = section_is(trim(p + 1), config, profile);
            key_indent = -1;
            continue;
        }
        char *sep = p + strcspn(p, "=:");
        if (!*sep) continue;
        key_indent = indent;
        if (!in) continue;
        *sep = 0;
        char *name = trim(p), *value = trim(sep + 1);
        for (int i = 0; i < K_N; i++) {
            if (strcasecmp(name, key_names[i]) != 0) continue;
            stk__free(k->v[i]);
            if (!(k->v[i] = stk__strdup(value))) rc = oom(err);
            break;
        }
        if (rc) break;
    }
    stk__free(text);
    if (rc) keys_free(k);
    return rc;
}

/* The path a variable names (a leading "~" is HOME), else ~/.aws/NAME; *out
 * NULL when there is no HOME to find it in. */
static int aws_file(const char *var, const char *name, char **out, stk_error *err) {
    const char *v = env(var), *home = env("HOME");
    bool tilde = v && v[0] == '~' && (v[1] == '/' || !v[1]) && home;
    *out = NULL;
    if (tilde) {
        size_t n = strlen(home) + strlen(v) + 1;
        if ((*out = stk__malloc(n))) snprintf(*out, n, "%s%s", home, v + 1);
    } else if (v) {
        *out = stk__strdup(v);
    } else if (home) {
        size_t n = strlen(home) + strlen(name) + 8;
        if ((*out = stk__malloc(n))) snprintf(*out, n, "%s/.aws/%s", home, name);
    } else {
        return 0;
    }
    return *out ? 0 : oom(err);
}

/* The keys into `a` (whose keys are NULL): AWS_NO_SIGN_REQUEST, the
 * environment, the profile's section of the credentials file, then of the
 * config file (its keys already read into *cfg, which gives them up). */
static int load_keys(stk__aws *a, const char *creds, const char *config, profile_keys *cfg,
                     stk_error *err) {
    const char *nosign = env("AWS_NO_SIGN_REQUEST");
    if (nosign && (strcasecmp(nosign, "true") == 0 || strcmp(nosign, "1") == 0)) return 0;
    const char *id = env("AWS_ACCESS_KEY_ID"), *secret = env("AWS_SECRET_ACCESS_KEY");
    if (id && !secret)
        return stk__err(err, -EINVAL, "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not");
    if (id) {
        a->from_env = true;
        const char *tok = env("AWS_SESSION_TOKEN");
        if (!(a->access_key = stk__strdup(id)) || !(a->secret_key = stk__strdup(secret)) ||
            (tok && !(a->session_token = stk__strdup(tok))))
            return oom(err);
        return 0;
    }
    profile_keys cr = {0};
    int rc = creds ? ini_read(creds, false, a->profile, &cr, err) : 0;
    if (rc) return rc;
    /* The first file whose section holds a key id gives all three. */
    profile_keys *src[2] = {&cr, cfg};
    const char *files[2] = {creds, config};
    for (int i = 0; i < 2 && !rc; i++) {
        profile_keys *k = src[i];
        if (!k->v[K_ID]) continue;
        if (!k->v[K_SECRET]) {
            rc = stk__err(err, -EINVAL,
                          "%s: profile '%s' has aws_access_key_id but no aws_secret_access_key",
                          files[i], a->profile);
            break;
        }
        a->access_key = k->v[K_ID];
        a->secret_key = k->v[K_SECRET];
        a->session_token = k->v[K_TOKEN];
        k->v[K_ID] = k->v[K_SECRET] = k->v[K_TOKEN] = NULL;
        if (!(a->creds_file = stk__strdup(files[i]))) rc = oom(err);
        break;
    }
    keys_free(&cr);
    return rc;
}

/* The paths of the credentials and config files (NULL: not used). */
static int aws_files(char **creds, char **config, stk_error *err) {
    int rc = aws_file("AWS_SHARED_CREDENTIALS_FILE", "credentials", creds, err);
    if (!rc && (rc = aws_file("AWS_CONFIG_FILE", "config", config, err))) {
        stk__free(*creds);
        *creds = NULL;
    }
    return rc;
}

/* The keys of the profile, as stk__aws_load finds them, into `a`; *cfg
 * keeps what the config file says of the profile besides. */
static int find_keys(stk__aws *a, const char *creds, const char *config, profile_keys *cfg,
                     stk_error *err) {
    int rc = config ? ini_read(config, true, a->profile, cfg, err) : 0;
    return rc ? rc : load_keys(a, creds, config, cfg, err);
}

/* An endpoint: "http(s)://host..." with a host. */
static bool endpoint_ok(const char *s) {
    const char *h = strncmp(s, "http://", 7) == 0 ? s + 7 : strncmp(s, "https://", 8) == 0 ? s + 8
                                                                                           : NULL;
    return h && *h && *h != '/' && *h != ':' && !strpbrk(s, " \t?#");
}

/* A region goes into host names and signatures: a name such as eu-west-1. */
static bool region_ok(const char *s) {
    return *s && strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") ==
                     strlen(s);
}

/* The first of variable v1, variable v2 and the config file's value, and
 * in *what where it came from (for messages). */
static const char *first_set(const char *v1, const char *v2, const char *from_config,
                             const char *config, const char **what) {
    const char *x = env(v1);
    *what = v1;
    if (!x) {
        x = env(v2);
        *what = v2;
    }
    if (!x) {
        x = from_config;
        *what = config;
    }
    return x;
}

int stk__aws_load(stk__aws *a, stk_error *err) {
    memset(a, 0, sizeof *a);
    profile_keys cfg = {0};
    char *creds = NULL, *config = NULL;
    const char *p = env("AWS_PROFILE");
    int rc = 0;
    if (!(a->profile = stk__strdup(p ? p : "default"))) {
        rc = oom(err);
        goto out;
    }
    if ((rc = aws_files(&creds, &config, err)) ||
        (rc = find_keys(a, creds, config, &cfg, err)))
        goto out;
    /* Each setting with where it came from, for the message. */
    const char *rwhat, *what;
    const char *r = first_set("AWS_REGION", "AWS_DEFAULT_REGION", cfg.v[K_REGION], config, &rwhat);
    if (r && !region_ok(r)) {
        rc = stk__err(err, -EINVAL, "%s: the region '%s' is not a region name such as eu-west-1",
                      rwhat, r);
        goto out;
    }
    const char *e =
        first_set("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", cfg.v[K_ENDPOINT], config, &what);
    if (e && !endpoint_ok(e)) {
        rc = stk__err(err, -EINVAL, "%s: the S3 endpoint '%s' is not an http:// or https:// URL",
                      what, e);
        goto out;
    }
    if (!(a->region = stk__strdup(r ? r : "us-east-1"))) {
        rc = oom(err);
        goto out;
    }
    if (e) {
        size_t n = strlen(e);
        while (n && e[n - 1] == '/') n--;
        a->endpoint = stk__strndup(e, n);
        a->path_style = true;
    } else {
        size_t n = strlen(a->region) + 40;
        if ((a->endpoint = stk__malloc(n)))
            snprintf(a->endpoint, n, "https://s3.%s.amazonaws.com", a->region);
        const char *style = env("AWS_S3_ADDRESSING_STYLE");
        a->path_style = style && strcmp(style, "path") == 0;
    }
    if (!a->endpoint) rc = oom(err);
out:
    keys_free(&cfg);
    stk__free(creds);
    stk__free(config);
    if (rc) stk__aws_free(a);
    return rc;
}

/* Whether two possibly-NULL strings differ. */
static bool differ(const char *x, const char *y) {
    return (x == NULL) != (y == NULL) || (x && strcmp(x, y) != 0);
}

/* The same chain as stk__aws_load with the profile it chose: the source the
 * keys came from is read again, and a source before it that now holds keys
 * wins as it would for a new process.  On failure `a` keeps its keys. */
int stk__aws_reload(stk__aws *a, bool *changed, stk_error *err) {
    *changed = false;
    stk__aws n;
    memset(&n, 0, sizeof n);
    n.profile = a->profile;
    profile_keys cfg = {0};
    char *creds = NULL, *config = NULL;
    int rc = aws_files(&creds, &config, err);
    if (!rc) rc = find_keys(&n, creds, config, &cfg, err);
    keys_free(&cfg);
    stk__free(creds);
    stk__free(config);
    n.profile = NULL;
    if (rc) {
        stk__aws_free(&n);
        return rc;
    }
    *changed = differ(n.access_key, a->access_key) || differ(n.secret_key, a->secret_key) ||
               differ(n.session_token, a->session_token);
    clear_keys(a);
    stk__free(a->creds_file);
    a->access_key = n.access_key;
    a->secret_key = n.secret_key;
    a->session_token = n.session_token;
    a->from_env = n.from_env;
    a->creds_file = n.creds_file;
    return 0;
}

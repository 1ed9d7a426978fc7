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

static const char *env(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

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

/* The value of `key` in section `section` of INI file `path` into *out
 * (from stk__malloc; NULL when absent).  Returns 0, or an error for a file
 * that exists and cannot be read. */
static int ini_get(const char *path, const char *section, const char *key, char **out,
                   stk_error *err) {
    *out = NULL;
    FILE *f = fopen(path, "re");
    if (!f) {
        if (errno == ENOENT || errno == ENOTDIR) return 0;
        int rc = -errno;
        return stk__err(err, rc, "%s: %s", path, stk_strerror(rc));
    }
    char line[4096];
    bool in = false;
    int rc = 0;
    while (fgets(line, sizeof line, f)) {
        char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        char *e = p + strlen(p);
        while (e > p && (e[-1] == '\n' || e[-1] == '\r' || e[-1] == ' ' || e[-1] == '\t')) *--e = 0;
        if (!*p || *p == '#' || *p == ';') continue;
        if (*p == '[') {
            char *close = strchr(p, ']');
            if (!close) continue;
            *close = 0;
            char *name = p + 1;
            while (*name == ' ') name++;
            char *ne = name + strlen(name);
            while (ne > name && ne[-1] == ' ') *--ne = 0;
            in = strcmp(name, section) == 0;
            continue;
        }
        if (!in) continue;
        char *eq = strchr(p, '=');
        if (!eq) continue;
        char *k = p, *ke = eq;
        while (ke > k && (ke[-1] == ' ' || ke[-1] == '\t')) ke--;
        if ((size_t)(ke - k) != strlen(key) || strncmp(k, key, (size_t)(ke - k)) != 0) continue;
        char *v = eq + 1;
        while (*v == ' ' || *v == '\t') v++;
        stk__free(*out);
        if (!(*out = stk__strdup(v))) {
            rc = stk__err(err, -ENOMEM, "out of memory");
            break;
        }
    }
    fclose(f);
    return rc;
}

/* ~/.aws/NAME, or the file a variable names. */
static char *aws_file(const char *var, const char *name) {
    const char *v = env(var);
    if (v) return stk__strdup(v);
    const char *home = env("HOME");
    if (!home) return NULL;
    size_t n = strlen(home) + strlen(name) + 8;
    char *s = stk__malloc(n);
    if (s) snprintf(s, n, "%s/.aws/%s", home, name);
    return s;
}

/* The section of the config file for `profile`. */
static void config_section(const char *profile, char *sec, size_t cap) {
    if (strcmp(profile, "default") == 0) snprintf(sec, cap, "default");
    else snprintf(sec, cap, "profile %s", profile);
}

static int64_t mtime_ns(const char *path) {
    struct stat st;
    if (!path || stat(path, &st) != 0) return -1;
    return (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
}

/* The keys, from the environment or the profile. */
static int load_keys(stk__aws *a, const char *creds, const char *config, stk_error *err) {
    clear_keys(a);
    stk__free(a->creds_file);
    a->creds_file = NULL;
    a->from_env = false;
    const char *nosign = env("AWS_NO_SIGN_REQUEST");
    if (nosign && (strcasecmp(nosign, "true") == 0 || strcmp(nosign, "1") == 0)) return 0;
    const char *id = env("AWS_ACCESS_KEY_ID"), *secret = env("AWS_SECRET_ACCESS_KEY");
    if (id && secret) {
        a->from_env = true;
        const char *tok = env("AWS_SESSION_TOKEN");
        if (!(a->access_key = stk__strdup(id)) || !(a->secret_key = stk__strdup(secret)) ||
            (tok && !(a->session_token = stk__strdup(tok))))
            return stk__err(err, -ENOMEM, "out of memory");
        return 0;
    }
    /* The profile's section of the credentials file, then of the config
     * file: the first holding a key id gives all three. */
    char sec[300];
    config_section(a->profile, sec, sizeof sec);
    const char *files[2] = {creds, config}, *secs[2] = {a->profile, sec};
    for (int k = 0; k < 2; k++) {
        if (!files[k]) continue;
        int rc = ini_get(files[k], secs[k], "aws_access_key_id", &a->access_key, err);
        if (rc) return rc;
        if (!a->access_key) continue;
        if ((rc = ini_get(files[k], secs[k], "aws_secret_access_key", &a->secret_key, err)) ||
            (rc = ini_get(files[k], secs[k], "aws_session_token", &a->session_token, err)))
            return rc;
        if (!a->secret_key) {
            clear_keys(a);
            return stk__err(err, -EINVAL,
                            "%s: profile '%s' has aws_access_key_id but no "
                            "aws_secret_access_key",
                            files[k], a->profile);
        }
        if (!(a->creds_file = stk__strdup(files[k])))
            return stk__err(err, -ENOMEM, "out of memory");
        a->creds_mtime_ns = mtime_ns(files[k]);
        return 0;
    }
    return 0;
}

static bool is_url(const char *s) {
    return strncmp(s, "http://", 7) == 0 || strncmp(s, "https://", 8) == 0;
}

int stk__aws_load(stk__aws *a, stk_error *err) {
    memset(a, 0, sizeof *a);
    char *creds = aws_file("AWS_SHARED_CREDENTIALS_FILE", "credentials");
    char *config = aws_file("AWS_CONFIG_FILE", "config");
    const char *p = env("AWS_PROFILE");
    int rc = 0;
    char *region = NULL, *endpoint = NULL;
    if (!(a->profile = stk__strdup(p ? p : "default"))) {
        rc = stk__err(err, -ENOMEM, "out of memory");
        goto out;
    }
    if ((rc = load_keys(a, creds, config, err))) goto out;
    const char *r = env("AWS_REGION");
    if (!r) r = env("AWS_DEFAULT_REGION");
    char sec[300];
    config_section(a->profile, sec, sizeof sec);
    if (!r && config && (rc = ini_get(config, sec, "region", &region, err))) goto out;
    a->region = stk__strdup(r ? r : region ? region : "us-east-1");
    const char *e = env("AWS_ENDPOINT_URL_S3");
    const char *what = "AWS_ENDPOINT_URL_S3";
    if (!e) {
        e = env("AWS_ENDPOINT_URL");
        what = "AWS_ENDPOINT_URL";
    }
    if (!e) {
        if (config && (rc = ini_get(config, sec, "endpoint_url", &endpoint, err))) goto out;
        e = endpoint;
        what = config;
    }
    if (e && !is_url(e)) {
        rc = stk__err(err, -EINVAL, "%s: the S3 endpoint '%s' is not an http:// or https:// URL",
                      what, e);
        goto out;
    }
    if (e) {
        size_t n = strlen(e);
        while (n && e[n - 1] == '/') n--;
        a->endpoint = stk__strndup(e, n);
        a->path_style = true;
    } else if (a->region) {
        size_t n = strlen(a->region) + 40;
        if ((a->endpoint = stk__malloc(n)))
            snprintf(a->endpoint, n, "https://s3.%s.amazonaws.com", a->region);
        const char *style = env("AWS_S3_ADDRESSING_STYLE");
        a->path_style = style && strcmp(style, "path") == 0;
    }
    if (!a->region || !a->endpoint) rc = stk__err(err, -ENOMEM, "out of memory");
out:
    stk__free(region);
    stk__free(endpoint);
    stk__free(creds);
    stk__free(config);
    if (rc) stk__aws_free(a);
    return rc;
}

/* Whether two possibly-NULL strings differ. */
static bool differ(const char *x, const char *y) {
    return (x == NULL) != (y == NULL) || (x && strcmp(x, y) != 0);
}

int stk__aws_reload(stk__aws *a, bool *changed, stk_error *err) {
    *changed = false;
    char *id = a->access_key, *secret = a->secret_key, *tok = a->session_token;
    a->access_key = a->secret_key = a->session_token = NULL;
    char *creds = aws_file("AWS_SHARED_CREDENTIALS_FILE", "credentials");
    char *config = aws_file("AWS_CONFIG_FILE", "config");
    int rc = load_keys(a, creds, config, err);
    stk__free(creds);
    stk__free(config);
    if (rc == 0)
        *changed = differ(id, a->access_key) || differ(secret, a->secret_key) ||
                   differ(tok, a->session_token);
    stk__free(id);
    stk__free(secret);
    stk__free(tok);
    return rc;
}

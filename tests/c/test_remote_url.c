/*
 * test_remote_url.c: dataset URLs, object URLs (path-style, virtual-hosted,
 * percent-encoding), and AWS settings found as the AWS CLI finds them:
 * environment, profiles of the credentials and config files, region and
 * endpoint precedence, anonymous access, reloading rewritten credentials,
 * and allocation failing at each point.  HOME and the AWS file variables
 * point into a temporary directory, so the machine's own settings never
 * matter.
 */
#include "util.h"

#include "core/fault.h"
#include "remote/remote.h"

#include <sys/stat.h>
#include <unistd.h>

static char tmp[4096];

static void write_text(const char *name, const char *text) {
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", tmp, name);
    test_write_file(p, text, strlen(text));
}

static void set_path(const char *var, const char *name) {
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", tmp, name);
    setenv(var, p, 1);
}

/* No AWS variable but HOME and the two files, which do not exist. */
static void clean_env(void) {
    static const char *vars[] = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                                 "AWS_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION",
                                 "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
                                 "AWS_NO_SIGN_REQUEST", "AWS_S3_ADDRESSING_STYLE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
    setenv("HOME", tmp, 1);
    set_path("AWS_SHARED_CREDENTIALS_FILE", "credentials");
    set_path("AWS_CONFIG_FILE", "config");
    char p[4200];
    snprintf(p, sizeof p, "%s/credentials", tmp);
    unlink(p);
    snprintf(p, sizeof p, "%s/config", tmp);
    unlink(p);
}

static void urls(void) {
    stk_error err = {0};
    stk__url u;
    CHECK(stk__is_remote("s3://b/x") && stk__is_remote("https://h/x") &&
          stk__is_remote("http://h") && !stk__is_remote("/data/s3://x") &&
          !stk__is_remote("s3:/x") && !stk__is_remote(NULL));
    CHECK_OK(stk__url_parse("s3://my-bucket/a/b/ds/", &u, &err));
    CHECK(u.scheme == STK__URL_S3 && !strcmp(u.bucket, "my-bucket") && !strcmp(u.key, "a/b/ds"));
    CHECK(!strcmp(u.text, "s3://my-bucket/a/b/ds") && u.origin == NULL);
    stk__url_free(&u);
    CHECK_OK(stk__url_parse("s3://bucket//", &u, &err));
    CHECK(!strcmp(u.key, "") && !strcmp(u.text, "s3://bucket"));
    stk__url_free(&u);
    CHECK_OK(stk__url_parse("https://host.example:8443/data/ds/", &u, &err));
    CHECK(u.scheme == STK__URL_HTTP && !strcmp(u.origin, "https://host.example:8443") &&
          !strcmp(u.key, "data/ds") && !strcmp(u.text, "https://host.example:8443/data/ds") &&
          u.bucket == NULL);
    stk__url_free(&u);
    CHECK_OK(stk__url_parse("http://[::1]:9000", &u, &err));
    CHECK(!strcmp(u.origin, "http://[::1]:9000") && !strcmp(u.key, ""));
    stk__url_free(&u);
    /* Refused, each naming the URL and what is wrong. */
    static const struct {
        const char *url, *why;
    } refused[] = {
        {"s3:///ds", "no bucket"},
        {"s3://", "no bucket"},
        {"s3://Bad_Bucket/ds", "lowercase"},
        {"s3://ab/ds", "3 to 63"},
        {"s3://-bucket/ds", "beginning and ending"},
        {"s3://aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa/x", "3 to 63"},
        {"s3://me@bucket/ds", "user"},
        {"s3://bucket//ds", "empty path segment"},
        {"s3://bucket/a//ds", "empty path segment"},
        {"s3://bucket/ds#frag", "fragment"},
        {"https:///x", "no host"},
        {"http://:8080/x", "no host"},
        {"http://h:http/x", "port"},
        {"http://h:70000/x", "port"},
        {"http://[::1/x", "IPv6"},
        {"https://h/x?v=1", "query"},
        {"https://h/x#top", "fragment"},
        {"https://user@h/x", "user"},
        {"https://user:pw@h/x", "user"},
        {"s3://bucket/a b", "spaces"},
        {"ftp://h/x", "s3://"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        CHECK_ERR(stk__url_parse(refused[i].url, &u, &err), -EINVAL, refused[i].why);
        CHECK(strstr(err.message, refused[i].url) != NULL);
        CHECK(u.text == NULL && u.key == NULL);
    }
}

static char *object(const char *url, const stk__aws *a, const char *name) {
    stk_error err = {0};
    stk__url u;
    CHECK_OK(stk__url_parse(url, &u, &err));
    char *s = stk__url_object(&u, a, name);
    CHECK(s != NULL);
    stk__url_free(&u);
    return s;
}

#define CHECK_OBJECT(url, a, name, want)                                      \
    do {                                                                       \
        char *s_ = object(url, a, name);                                       \
        if (strcmp(s_, want) != 0) {                                           \
            fprintf(stderr, "%s:%d: %s + '%s' gave %s, not %s\n", __FILE__, __LINE__, url, \
                    name, s_, want);                                           \
            exit(1);                                                           \
        }                                                                      \
        stk__free(s_);                                                         \
    } while (0)

static void objects(void) {
    stk__aws a;
    memset(&a, 0, sizeof a);
    a.region = "eu-west-1";
    a.endpoint = "http://127.0.0.1:9000";
    a.path_style = true;
    CHECK_OBJECT("s3://bucket/pre/ds", &a, "shard-000001.stk",
                 "http://127.0.0.1:9000/bucket/pre/ds/shard-000001.stk");
    CHECK_OBJECT("s3://bucket/pre/ds", &a, "", "http://127.0.0.1:9000/bucket/pre/ds");
    /* At the bucket's root: no empty path parts. */
    CHECK_OBJECT("s3://bucket/", &a, "manifest.json", "http://127.0.0.1:9000/bucket/manifest.json");
    CHECK_OBJECT("s3://bucket", &a, "", "http://127.0.0.1:9000/bucket");
    /* A custom endpoint is path-style whatever the flag says. */
    a.path_style = false;
    CHECK_OBJECT("s3://bucket/pre", &a, "m.json", "http://127.0.0.1:9000/bucket/pre/m.json");
    /* AWS's own: virtual-hosted, unless asked otherwise or the bucket's name
     * has dots. */
    a.endpoint = "https://s3.eu-west-1.amazonaws.com";
    CHECK_OBJECT("s3://bucket/pre/ds", &a, "manifest.json",
                 "https://bucket.s3.eu-west-1.amazonaws.com/pre/ds/manifest.json");
    CHECK_OBJECT("s3://bucket", &a, "manifest.json",
                 "https://bucket.s3.eu-west-1.amazonaws.com/manifest.json");
    CHECK_OBJECT("s3://my.bucket/pre", &a, "m.json",
                 "https://s3.eu-west-1.amazonaws.com/my.bucket/pre/m.json");
    a.path_style = true;
    CHECK_OBJECT("s3://bucket/pre", &a, "m.json",
                 "https://s3.eu-west-1.amazonaws.com/bucket/pre/m.json");
    /* The key is taken as it is written and percent-encoded, '/' kept. */
    a.path_style = false;
    CHECK_OBJECT("s3://bucket/r%C3%A9sum%C3%A9+x/~a_b-c.d", &a, "a=b \xc3\xa9.stk",
                 "https://bucket.s3.eu-west-1.amazonaws.com/r%25C3%25A9sum%25C3%25A9%2Bx/"
                 "~a_b-c.d/a%3Db%20%C3%A9.stk");
    /* HTTP: the dataset's URL and the name. */
    CHECK_OBJECT("http://h:8/x/ds/", NULL, "manifest.json", "http://h:8/x/ds/manifest.json");
    CHECK_OBJECT("http://h:8/x/ds", NULL, "", "http://h:8/x/ds");
    CHECK_OBJECT("https://h", &a, "m.json", "https://h/m.json");
}

static void from_env_and_defaults(void) {
    stk_error err = {0};
    stk__aws a;
    /* Nothing set: anonymous, us-east-1, AWS's endpoint, virtual-hosted. */
    clean_env();
    CHECK_OK(stk__aws_load(&a, &err));
    CHECK(a.access_key == NULL && a.secret_key == NULL && a.session_token == NULL &&
          !a.from_env && a.creds_file == NULL && !strcmp(a.profile, "default"));
    CHECK(!strcmp(a.region, "us-east-1") &&
          !strcmp(a.endpoint, "https://s3.us-east-1.amazonaws.com") && !a.path_style);
    stk__aws_free(&a);
    /* No HOME and no file variables: no files, still anonymous. */
    unsetenv("HOME");
    unsetenv("AWS_SHARED_CREDENTIALS_FILE");
    unsetenv("AWS_CONFIG_FILE");
    CHECK_OK(stk__aws_load(&a, &err));
    CHECK(a.access_key == NULL && !strcmp(a.region, "us-east-1"));
    stk__aws_free(&a);
    clean_env();
    /* The environment. */
    setenv("AWS_ACCESS_KEY_ID", "AKIDENV", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "secret-env", 1);
    setenv("AWS_SESSION_TOKEN", "token-env", 1);
    setenv("AWS_DEFAULT_REGION", "eu-central-1", 1);
    CHECK_OK(stk__aws_load(&a, &err));
    CHECK(!strcmp(a.access_key, "AKIDENV") && !strcmp(a.secret_key, "secret-env") &&
          !strcmp(a.session_token, "token-env") && a.from_env && a.creds_file == NULL);
    CHECK(!strcmp(a.region, "eu-central-1") &&
          !strcmp(a.endpoint, "https://s3.eu-central-1.amazonaws.com") && !a.path_style);
    stk__aws_free(&a);
    setenv("AWS_REGION", "ap-northeast-1", 1);
    setenv("AWS_S3_ADDRESSING_STYLE", "path", 1);
    CHECK_OK(stk__aws_load(&a, &err));
    CHECK(!strcmp(a.region, "ap-northeast-1") && a.path_style);
    stk__aws_free(&a);
    setenv("AWS_NO_SIGN_REQUEST", "true", 1);
    CHECK_OK(stk__aws_load(&a, &err));
    CHECK(a.access_key == NULL && a.session_token == NULL && !a.from_env);
    stk__aws_free(&a);
    unsetenv("AWS_NO_SIGN_REQUEST");
    unsetenv("AWS_SECRET_ACCESS_KEY");
    CHECK_ERR(stk__aws_load(&a, &err), -EINVAL, "AWS_SECRET_ACCESS_KEY");
    clean_env();
    setenv("AWS_ENDPOINT_URL", "https://", 1);
    CHECK_ERR(stk__aws_load(&a, &err), -EINVAL, "AWS_ENDPOINT_URL");
    setenv("AWS_ENDPOINT_URL", "https://e/", 1);
    setenv("AWS_REGION", "eu west", 1);
    CHECK_ERR(stk__aws_load(&a, &err), -EINVAL, "AWS_REGION");
}

static void from_files(void) {
    stk_error err = {0};
    stk__aws a;
    char path[4200];
    clean_env();
    write_text("credentials", "# comment\n[default]\naws_access_key_id = AKIDDEF\n"
                              "aws_secret_access_key=secret-def\n\n; another\n[work]\n"
                              "  aws_access_key_id =AKIDWORK  \n"
                              "AWS_SECRET_ACCESS_KEY = secret-work\r\n"
                              "aws_session_token: tok-work\n"
                              "unknown_key = ignored\n");
    write_text("config", "[default]\nregion = ap-south-1\n"
                         "[profile work]\nregion = us-west-2\n"
                         "endpoint_url = http://127.0.0.1:9000/\n"
                         "[cfgonly]\nregion = wrong-1\n"
                         "[profile cfgonly]\naws_access_key_id = AKIDCFG\n"
                         "aws_secret_access_key = secret-cfg\n"
                         "s3 =\n  endpoint_url = http://nested:1\n  region = nested-1\n"
                         "[profile broken]\naws_access_key_id = AKIDX\n"
                         "[profile badurl]\nendpoint_url = localhost:9000\n");
    CHECK_OK(stk__aws_load(&a, &err));
    snprintf(path, sizeof path, "%s/credentials", tmp);
    struct stat st;
    CHECK(stat(path, &st) == 0);
    CHECK(!strcmp(a.access_key, "AKIDDEF") && !strcmp(a.secret_key, "secret-def") &&
          a.session_token == NULL && !a.from_env && !strcmp(a.region, "ap-south-1"));
    CHECK(a.creds_file && !strcmp(a.creds_file, path) && st.st_size > 0);
    stk__aws_free(&a);
    /* AWS_PROFILE chooses; the config file's "[profile work]" gives the
     * region and endpoint, and a custom endpoint is path-style. */
    setenv("AWS_PROFILE", "work", 1);
    CHECK_OK(stk__aws_load(&a, &err));
    CHECK(!strcmp(a.access_key, "AKIDWORK") && !strcmp(a.secret_key, "secret-work") &&
          !strcmp(a.session_token, "tok-work") && !strcmp(a.profile, "work"));
    CHECK(!strcmp(a.region, "us-west-2") && !strcmp(a.endpoint, "http://127.0.0.1:9000") &&
          a.path_style);
    stk__aws_free(&a);
    /* Endpoint precedence: the S3 variable, the general one, the profile's. */
    setenv("AWS_ENDPOINT_URL", "http://general:1", 1);
    CHECK_OK(stk__aws_load(&a, &err));
    CHECK(!strcmp(a.endpoint, "http://general:1") && a.path_style);
    stk__aws_free(&a);
    setenv("AWS_ENDPOINT_URL_S3", "https://s3only:2/", 1);
    setenv("AWS_DEFAULT_REGION", "sa-east-1", 1);
    CHECK_OK(stk__aws_load(&a, &err));
    CHECK(!strcmp(a.endpoint, "https://s3only:2") && !strcmp(a.region, "sa-east-1"));
    stk__aws_free(&a);
    setenv("AWS_ENDPOINT_URL_S3", "s3only:2", 1);
    CHECK_ERR(stk__aws_load(&a, &err), -EINVAL, "AWS_ENDPOINT_URL_S3");
    unsetenv("AWS_ENDPOINT_URL_S3");
    unsetenv("AWS_ENDPOINT_URL");
    unsetenv("AWS_DEFAULT_REGION");
    /* Keys from the config file's "[profile cfgonly]"; "[cfgonly]" is no
     * profile there, and the nested "s3 =" block is not the profile's. */
    setenv("AWS_PROFILE", "cfgonly", 1);
    CHECK_OK(stk__aws_load(&a, &err));
    snprintf(path, sizeof path, "%s/config", tmp);
    CHECK(!strcmp(a.access_key, "AKIDCFG") && !strcmp(a.secret_key, "secret-cfg") &&
          !strcmp(a.creds_file, path));
    CHECK(!strcmp(a.region, "us-east-1") && !strcmp(a.endpoint, "https://s3.us-east-1.amazonaws.com"));
    stk__aws_free(&a);
    setenv("AWS_PROFILE", "broken", 1);
    CHECK_ERR(stk__aws_load(&a, &err), -EINVAL, "aws_secret_access_key");
    CHECK(strstr(err.message, "broken") && strstr(err.message, "config"));
    setenv("AWS_PROFILE", "badurl", 1);
    CHECK_ERR(stk__aws_load(&a, &err), -EINVAL, path);
    /* "[profile default]" is the default profile too; "~" is HOME. */
    clean_env();
    write_text("conf2", "[profile default]\nregion = eu-north-1\n");
    setenv("AWS_CONFIG_FILE", "~/conf2", 1);
    CHECK_OK(stk__aws_load(&a, &err));
    CHECK(!strcmp(a.region, "eu-north-1"));
    stk__aws_free(&a);
    /* A file that exists but cannot be read is named. */
    set_path("AWS_SHARED_CREDENTIALS_FILE", "adir");
    snprintf(path, sizeof path, "%s/adir", tmp);
    CHECK(mkdir(path, 0700) == 0);
    CHECK_ERR(stk__aws_load(&a, &err), -EISDIR, path);
    rmdir(path);
}

static void reloading(void) {
    stk_error err = {0};
    stk__aws a;
    bool changed = true;
    clean_env();
    write_text("credentials", "[work]\naws_access_key_id = AKIDWORK\n"
                              "aws_secret_access_key = secret-work\naws_session_token = tok-work\n");
    setenv("AWS_PROFILE", "work", 1);
    CHECK_OK(stk__aws_load(&a, &err));
    CHECK_OK(stk__aws_reload(&a, &changed, &err));
    CHECK(!changed && !strcmp(a.session_token, "tok-work") && a.creds_file);
    write_text("credentials", "[work]\naws_access_key_id = AKIDWORK\n"
                              "aws_secret_access_key = secret-work\n"
                              "aws_session_token = tok-fresh\n");
    CHECK_OK(stk__aws_reload(&a, &changed, &err));
    CHECK(changed && !strcmp(a.session_token, "tok-fresh") && !strcmp(a.profile, "work"));
    /* A reload that fails keeps the keys there were. */
    write_text("credentials", "[work]\naws_access_key_id = AKIDWORK\n");
    CHECK_ERR(stk__aws_reload(&a, &changed, &err), -EINVAL, "aws_secret_access_key");
    CHECK(!changed && !strcmp(a.access_key, "AKIDWORK") && !strcmp(a.session_token, "tok-fresh"));
    stk__aws_free(&a);
    /* From the environment: read there again. */
    setenv("AWS_ACCESS_KEY_ID", "AKIDENV", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "secret-env", 1);
    setenv("AWS_SESSION_TOKEN", "t1", 1);
    CHECK_OK(stk__aws_load(&a, &err));
    CHECK_OK(stk__aws_reload(&a, &changed, &err));
    CHECK(!changed && a.from_env);
    setenv("AWS_SESSION_TOKEN", "t2", 1);
    CHECK_OK(stk__aws_reload(&a, &changed, &err));
    CHECK(changed && !strcmp(a.session_token, "t2") && a.from_env);
    stk__aws_free(&a);
}

/* Allocation failing at each point: -ENOMEM, nothing half made. */
static void out_of_memory(void) {
    stk_error err = {0};
    clean_env();
    write_text("credentials", "[default]\naws_access_key_id = K\naws_secret_access_key = S\n"
                              "aws_session_token = T\n");
    write_text("config", "[default]\nregion = eu-west-3\nendpoint_url = http://e:1\n");
    long points = 0;
    for (long n = 1;; n++, points++) {
        stk__aws a;
        stk__url u;
        stk__fault_arm(STK__FAULT_ALLOC, n, ENOMEM);
        memset(&err, 0, sizeof err);
        int rc = stk__aws_load(&a, &err);
        int rc2 = stk__url_parse("s3://bucket/pre/ds", &u, &err);
        char *s = rc == 0 && rc2 == 0 ? stk__url_object(&u, &a, "m.json") : NULL;
        bool changed = false;
        int rc3 = rc == 0 ? stk__aws_reload(&a, &changed, &err) : -ENOMEM;
        long seen = stk__fault_seen(STK__FAULT_ALLOC);
        stk__fault_reset();
        CHECK(rc == 0 || (rc == -ENOMEM && err.code == -ENOMEM));
        CHECK(rc2 == 0 || rc2 == -ENOMEM);
        CHECK(rc3 == 0 || rc3 == -ENOMEM);
        if (rc == 0) CHECK(a.region && a.endpoint && a.profile && !changed);
        if (rc == 0 && rc3 == 0) CHECK(!strcmp(a.session_token, "T"));
        if (rc == 0 && rc3 != 0) CHECK(!strcmp(a.access_key, "K"));
        if (rc) CHECK(a.region == NULL && a.access_key == NULL);
        if (rc2) CHECK(u.text == NULL && u.bucket == NULL);
        if (s) CHECK(!strcmp(s, "http://e:1/bucket/pre/ds/m.json"));
        stk__free(s);
        if (rc == 0) stk__aws_free(&a);
        if (rc2 == 0) stk__url_free(&u);
        if (seen < n) break;
    }
    CHECK(points > 10);
}

/* What servers send: header lines, XML error bodies, Retry-After. */
static void responses(void) {
    stk__fetch f;
    memset(&f, 0, sizeof f);
    f.object_size = UINT64_MAX;
    f.lo = 100, f.hi = 200;
    const char *lines[] = {"HTTP/1.1 206 Partial Content\r\n", "ETag:  \"abc\" \r\n",
                           "content-range: bytes 100-199/134288\r\n",
                           "Content-Length: 100\r\n", "Retry-After: 7\r\n",
                           "X-Amz-Bucket-Region: eu-west-1\r\n", "no colon here\r\n"};
    for (size_t i = 0; i < sizeof lines / sizeof *lines; i++)
        stk__fetch_header(&f, lines[i], strlen(lines[i]));
    CHECK(!strcmp(f.etag, "\"abc\"") && f.object_size == 134288);
    CHECK(!strcmp(f.retry_after, "7") && !strcmp(f.region, "eu-west-1"));
    /* A new response forgets the last one's headers. */
    stk__fetch_header(&f, "HTTP/1.1 200 OK\r\n", 17);
    CHECK(f.etag[0] == '\0' && f.object_size == UINT64_MAX && f.region[0] == '\0');
    /* Sizes that are not plain digits, or overflow, stay unknown. */
    const char *odd[] = {"Content-Range: bytes 0-9/*\r\n", "Content-Range: bytes 0-9/-5\r\n",
                         "Content-Range: bytes 0-9/18446744073709551616\r\n",
                         "Content-Range: bytes 0-9/12x\r\n"};
    for (size_t i = 0; i < sizeof odd / sizeof *odd; i++) {
        f.object_size = UINT64_MAX;
        stk__fetch_header(&f, odd[i], strlen(odd[i]));
        CHECK(f.object_size == UINT64_MAX);
    }
    /* Content-Length is the object's size only for an unranged request. */
    stk__fetch_header(&f, "Content-Length: 55\r\n", 20);
    CHECK(f.object_size == UINT64_MAX);
    f.lo = f.hi = 0;
    stk__fetch_header(&f, "Content-Length: 55\r\n", 20);
    CHECK(f.object_size == 55);

    char out[16];
    const char *body = "<Error><Code> SlowDown </Code><Region>us-west-2</Region>"
                       "<Message>a message longer than the buffer</Message></Error>";
    stk__xml_element(body, "Code", out, sizeof out);
    CHECK(!strcmp(out, "SlowDown"));
    stk__xml_element(body, "Message", out, sizeof out);
    CHECK(strlen(out) == sizeof out - 1 && !strncmp(out, "a message", 9));
    stk__xml_element(body, "Nope", out, sizeof out);
    CHECK(out[0] == '\0');
    stk__xml_element("<Code>unterminated", "Code", out, sizeof out);
    CHECK(out[0] == '\0');

    const int64_t now = 1445412480; /* Wed, 21 Oct 2015 07:28:00 GMT */
    CHECK(stk__retry_after_s("3", now) == 3 && stk__retry_after_s("0", now) == 0);
    CHECK(stk__retry_after_s("Wed, 21 Oct 2015 07:28:30 GMT", now) == 30);
    CHECK(stk__retry_after_s("Wed, 21 Oct 2015 07:00:00 GMT", now) == 0);
    CHECK(stk__retry_after_s("", now) == -1 && stk__retry_after_s(NULL, now) == -1);
    CHECK(stk__retry_after_s("-1", now) == -1 && stk__retry_after_s("soon", now) == -1);
    CHECK(stk__retry_after_s("99999999999999999999", now) == -1);
    /* The two obsolete forms of an HTTP date, and trailing space; a date
     * with something after it, or in another zone, is not one. */
    CHECK(stk__retry_after_s("Wednesday, 21-Oct-15 07:28:45 GMT", now) == 45);
    CHECK(stk__retry_after_s("Wed Oct 21 07:29:00 2015", now) == 60);
    CHECK(stk__retry_after_s(" Wed, 21 Oct 2015 07:28:10 GMT \r\n", now) == 10);
    CHECK(stk__retry_after_s("Wed, 21 Oct 2015 07:28:30 GMT and more", now) == -1);
    CHECK(stk__retry_after_s("Wed, 21 Oct 2015 07:28:30 PST", now) == -1);
}

int main(void) {
    snprintf(tmp, sizeof tmp, "%s", test_dir("remote-url"));
    CHECK(mkdir(tmp, 0700) == 0);
    urls();
    responses();
    objects();
    from_env_and_defaults();
    from_files();
    reloading();
    out_of_memory();
    test_rmrf(tmp);
    return 0;
}

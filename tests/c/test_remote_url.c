/*
 * test_remote_url.c: dataset URLs, object URLs (path-style, virtual-hosted,
 * percent-encoding), and AWS settings found as the AWS CLI finds them:
 * environment, profiles of the credentials and config files, region and
 * endpoint precedence, anonymous access, reloading rewritten credentials.
 * HOME and the AWS file variables point into a temporary directory, so the
 * machine's own settings never matter.
 */
#include "util.h"

#include "remote/remote.h"

#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char tmp[256];

static void write_text(const char *name, const char *text) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", tmp, name);
    FILE *f = fopen(p, "w");
    CHECK(f != NULL);
    fputs(text, f);
    fclose(f);
}

static void clean_env(void) {
    static const char *vars[] = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                                 "AWS_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION",
                                 "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
                                 "AWS_NO_SIGN_REQUEST", "AWS_S3_ADDRESSING_STYLE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
    char p[512];
    setenv("HOME", tmp, 1);
    snprintf(p, sizeof p, "%s/credentials", tmp);
    setenv("AWS_SHARED_CREDENTIALS_FILE", p, 1);
    snprintf(p, sizeof p, "%s/config", tmp);
    setenv("AWS_CONFIG_FILE", p, 1);
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
    CHECK(!strcmp(u.text, "s3://my-bucket/a/b/ds"));
    stk__url_free(&u);
    CHECK_OK(stk__url_parse("s3://bucket", &u, &err));
    CHECK(!strcmp(u.key, ""));
    stk__url_free(&u);
    CHECK_OK(stk__url_parse("https://host.example:8443/data/ds", &u, &err));
    CHECK(u.scheme == STK__URL_HTTP && !strcmp(u.origin, "https://host.example:8443") &&
          !strcmp(u.key, "data/ds"));
    stk__url_free(&u);
    CHECK_ERR(stk__url_parse("s3:///ds", &u, &err), -EINVAL, "no bucket");
    CHECK_ERR(stk__url_parse("s3://Bad_Bucket/ds", &u, &err), -EINVAL, "lowercase");
    CHECK_ERR(stk__url_parse("s3://ab/ds", &u, &err), -EINVAL, "3 to 63");
    CHECK_ERR(stk__url_parse("https:///x", &u, &err), -EINVAL, "no host");
    CHECK_ERR(stk__url_parse("https://h/x?v=1", &u, &err), -EINVAL, "query");
    CHECK_ERR(stk__url_parse("https://user@h/x", &u, &err), -EINVAL, "user");
    CHECK_ERR(stk__url_parse("s3://bucket/a b", &u, &err), -EINVAL, "spaces");
    CHECK_ERR(stk__url_parse("ftp://h/x", &u, &err), -EINVAL, "s3://");
    CHECK_ERR(stk__url_parse("s3://", &u, &err), -EINVAL, "no bucket");
    CHECK_ERR(stk__url_parse("s3://bucket//ds", &u, &err), -EINVAL, "empty path segment");
    CHECK_ERR(stk__url_parse("http://:8080/x", &u, &err), -EINVAL, "no host");
    CHECK_ERR(stk__url_parse("http://h:70000/x", &u, &err), -EINVAL, "port");
}

static void objects(void) {
    stk_error err = {0};
    stk__url u;
    stk__aws a;
    memset(&a, 0, sizeof a);
    a.endpoint = "http://127.0.0.1:9000";
    a.path_style = true;
    CHECK_OK(stk__url_parse("s3://bucket/pre/ds", &u, &err));
    char *s = stk__url_object(&u, &a, "shard-000001.stk");
    CHECK(!strcmp(s, "http://127.0.0.1:9000/bucket/pre/ds/shard-000001.stk"));
    stk__free(s);
    s = stk__url_object(&u, &a, "");
    CHECK(!strcmp(s, "http://127.0.0.1:9000/bucket/pre/ds"));
    stk__free(s);
    a.endpoint = "https://s3.eu-west-1.amazonaws.com";
    a.region = "eu-west-1";
    a.path_style = false;
    s = stk__url_object(&u, &a, "manifest.json");
    CHECK(!strcmp(s, "https://bucket.s3.eu-west-1.amazonaws.com/pre/ds/manifest.json"));
    stk__free(s);
    stk__url_free(&u);
    /* A dotted bucket stays path-style; the key is percent-encoded. */
    CHECK_OK(stk__url_parse("s3://my.bucket/r%C3%A9sum%C3%A9+x", &u, &err));
    s = stk__url_object(&u, &a, "a=b.stk");
    CHECK(!strcmp(s, "https://s3.eu-west-1.amazonaws.com/my.bucket/r%25C3%25A9sum%25C3%25A9%2Bx/"
                     "a%3Db.stk"));
    stk__free(s);
    stk__url_free(&u);
    /* At the bucket's root: no empty path parts. */
    CHECK_OK(stk__url_parse("s3://bucket", &u, &err));
    a.endpoint = "http://e:1";
    a.path_style = true;
    s = stk__url_object(&u, &a, "manifest.json");
    CHECK(!strcmp(s, "http://e:1/bucket/manifest.json"));
    stk__free(s);
    /* A custom endpoint is path-style whatever the flag says. */
    a.path_style = false;
    s = stk__url_object(&u, &a, "manifest.json");
    CHECK(!strcmp(s, "http://e:1/bucket/manifest.json"));
    stk__free(s);
    stk__url_free(&u);
    CHECK_OK(stk__url_parse("http://h:8/x/ds", &u, &err));
    s = stk__url_object(&u, NULL, "manifest.json");
    CHECK(!strcmp(s, "http://h:8/x/ds/manifest.json"));
    stk__free(s);
    stk__url_free(&u);
}

static void credentials(void) {
    stk_error err = {0};
    stk__aws a;
    /* Nothing set: anonymous, us-east-1, AWS's endpoint, virtual-hosted. */
    clean_env();
    CHECK_OK(stk__aws_load(&a, &err));
    CHECK(a.access_key == NULL && !strcmp(a.region, "us-east-1") &&
          !strcmp(a.endpoint, "https://s3.us-east-1.amazonaws.com") && !a.path_style);
    stk__aws_free(&a);
    /* The environment. */
    setenv("AWS_ACCESS_KEY_ID", "AKIDENV", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "secret-env", 1);
    setenv("AWS_SESSION_TOKEN", "token-env", 1);
    setenv("AWS_DEFAULT_REGION", "eu-central-1", 1);
    CHECK_OK(stk__aws_load(&a, &err));
    CHECK(!strcmp(a.access_key, "AKIDENV") && !strcmp(a.secret_key, "secret-env") &&
          !strcmp(a.session_token, "token-env") && a.from_env);
    CHECK(!strcmp(a.region, "eu-central-1") &&
          !strcmp(a.endpoint, "https://s3.eu-central-1.amazonaws.com"));
    stk__aws_free(&a);
    setenv("AWS_NO_SIGN_REQUEST", "true", 1);
    CHECK_OK(stk__aws_load(&a, &err));
    CHECK(a.access_key == NULL);
    stk__aws_free(&a);

    /* Profiles of the files; AWS_PROFILE chooses. */
    clean_env();
    write_text("credentials", "# comment\n[default]\naws_access_key_id = AKIDDEF\n"
                              "aws_secret_access_key=secret-def\n\n[work]\n"
                              "  aws_access_key_id =AKIDWORK  \n"
                              "aws_secret_access_key = secret-work\n"
                              "aws_session_token = tok-work\n");
    write_text("config", "[default]\nregion = ap-south-1\n[profile work]\nregion = us-west-2\n"
                         "endpoint_url = http://127.0.0.1:9000/\n"
                         "[profile cfgonly]\naws_access_key_id = AKIDCFG\n"
                         "aws_secret_access_key = secret-cfg\n"
                         "[profile broken]\naws_access_key_id = AKIDX\n");
    CHECK_OK(stk__aws_load(&a, &err));
    CHECK(!strcmp(a.access_key, "AKIDDEF") && !strcmp(a.secret_key, "secret-def") &&
          a.session_token == NULL && !a.from_env && !strcmp(a.region, "ap-south-1"));
    stk__aws_free(&a);
    setenv("AWS_PROFILE", "work", 1);
    CHECK_OK(stk__aws_load(&a, &err));
    CHECK(!strcmp(a.access_key, "AKIDWORK") && !strcmp(a.session_token, "tok-work"));
    CHECK(!strcmp(a.region, "us-west-2") && !strcmp(a.endpoint, "http://127.0.0.1:9000") &&
          a.path_style);
    stk__aws_free(&a);
    /* Endpoint precedence: the S3 variable, the general one, the profile's. */
    setenv("AWS_ENDPOINT_URL", "http://general:1", 1);
    CHECK_OK(stk__aws_load(&a, &err));
    CHECK(!strcmp(a.endpoint, "http://general:1"));
    stk__aws_free(&a);
    setenv("AWS_ENDPOINT_URL_S3", "https://s3only:2", 1);
    setenv("AWS_REGION", "sa-east-1", 1);
    CHECK_OK(stk__aws_load(&a, &err));
    CHECK(!strcmp(a.endpoint, "https://s3only:2") && !strcmp(a.region, "sa-east-1"));
    stk__aws_free(&a);
    setenv("AWS_ENDPOINT_URL_S3", "s3only:2", 1);
    CHECK_ERR(stk__aws_load(&a, &err), -EINVAL, "AWS_ENDPOINT_URL_S3");
    unsetenv("AWS_ENDPOINT_URL_S3");
    unsetenv("AWS_ENDPOINT_URL");
    setenv("AWS_PROFILE", "cfgonly", 1);
    CHECK_OK(stk__aws_load(&a, &err));
    CHECK(!strcmp(a.access_key, "AKIDCFG") && !strcmp(a.secret_key, "secret-cfg"));
    stk__aws_free(&a);
    setenv("AWS_PROFILE", "broken", 1);
    CHECK_ERR(stk__aws_load(&a, &err), -EINVAL, "aws_secret_access_key");

    /* Reloading: a rewritten file gives new keys; an unchanged one none. */
    setenv("AWS_PROFILE", "work", 1);
    CHECK_OK(stk__aws_load(&a, &err));
    bool changed = true;
    CHECK_OK(stk__aws_reload(&a, &changed, &err));
    CHECK(!changed && !strcmp(a.session_token, "tok-work"));
    write_text("credentials", "[work]\naws_access_key_id = AKIDWORK\n"
                              "aws_secret_access_key = secret-work\n"
                              "aws_session_token = tok-fresh\n");
    CHECK_OK(stk__aws_reload(&a, &changed, &err));
    CHECK(changed && !strcmp(a.session_token, "tok-fresh"));
    stk__aws_free(&a);
}

int main(void) {
    snprintf(tmp, sizeof tmp, "/tmp/stk-test-remote-%d", (int)getpid());
    CHECK(mkdir(tmp, 0700) == 0);
    urls();
    objects();
    credentials();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    CHECK(system(cmd) == 0);
    return 0;
}

#include "util.h"
int main(void) {
    stk_error err = {0};
    stk_field f = {.name = "x", .dtype = STK_F32, .ndim = 2, .shape = {STK_RAGGED, 4}};
    const char *dir = test_dir("smoke");
    stk_writer *w = NULL;
    CHECK_OK(stk_writer_create(dir, &f, 1, NULL, &w, &err));
    float v[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    stk_value val = {v, 3};
    CHECK_OK(stk_writer_append(w, &val, &err));
    CHECK_OK(stk_writer_finish(w, &err));
    stk_writer_free(w);
    stk_dataset *ds = NULL;
    CHECK_OK(stk_dataset_open(dir, &ds, &err));
    CHECK(stk_dataset_num_records(ds) == 1);
    float out[12];
    size_t len;
    CHECK_OK(stk_dataset_read(ds, 0, 0, out, sizeof out, &len, STK_READ_VERIFY, &err));
    CHECK(len == sizeof v && memcmp(out, v, len) == 0);
    CHECK_OK(stk_dataset_verify(ds, NULL, NULL, &err));
    stk_dataset_close(ds);
    return 0;
}

/*
 * merge.c: stk_merge, joining the parts of a split pack (each written by a
 * writer with part_index/part_count) into one dataset by writing one
 * manifest over their shards; no shard is rewritten.
 */
#define _GNU_SOURCE
#include "format.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

/* ---- merging parts ---- */

static int merge_locked(const char *path, uint32_t want, stk_error *err);

int stk_merge(const char *path, stk_error *err) { return stk_merge_parts(path, 0, err); }

int stk_merge_parts(const char *path, uint32_t count, stk_error *err) {
    if (!path) return stk__err(err, -EINVAL, "stk_merge: NULL path");
    if (count == STK_PARTS_OPEN || count > 99999)
        return stk__err(err, -EINVAL, "stk_merge_parts: %u parts: a count from 1 to 99999",
                        count);
    /* No part may be written while the parts are merged. */
    int lock = -1;
    int rc = stk__take_lock(path, STK__LOCK_NAME, true, &lock, err);
    if (rc) return rc;
    rc = merge_locked(path, count, err);
    close(lock);
    return rc;
}

/* The count a part records, or `want` for an open one given a count. */
static uint32_t part_count_of(const stk__manifest *m, uint32_t want) {
    return want && m->part_count == STK_PARTS_OPEN ? want : m->part_count;
}

static int merge_locked(const char *path, uint32_t want, stk_error *err) {
    if (stk__exists_in(path, STK__MANIFEST))
        return stk__err(err, -EEXIST, "%s: already holds a merged dataset", path);
    DIR *d = opendir(path);
    if (!d) return stk__err(err, -errno, "%s: %s", path, stk_strerror(-errno));
    stk__manifest *parts = NULL;
    size_t nparts = 0, cap = 0;
    int rc = 0;
    struct dirent *e;
    char unfinished[64] = "";
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, ".packing", 8) == 0 && !unfinished[0])
            snprintf(unfinished, sizeof unfinished, "%s", e->d_name);
        size_t n = strlen(e->d_name);
        if (strncmp(e->d_name, "part-", 5) != 0 || n < 6 ||
            strcmp(e->d_name + n - 5, ".json") != 0)
            continue;
        if (nparts == cap) {
            cap = cap ? cap * 2 : 16;
            stk__manifest *p = stk__realloc(parts, cap * sizeof *p);
            if (!p) {
                rc = stk__err(err, -ENOMEM, "out of memory");
                break;
            }
            parts = p;
        }
        char *file = stk__path_join(path, e->d_name);
        char *text = NULL;
        size_t len = 0;
        rc = file ? stk__read_file(file, &text, &len) : -ENOMEM;
        if (rc) {
            stk__err(err, rc, "%s: %s", file ? file : path, stk_strerror(rc));
        } else {
            rc = stk__manifest_parse(text, len, file, &parts[nparts], err);
            if (!rc && !parts[nparts].is_part) {
                stk__manifest_clear(&parts[nparts]);
                rc = stk__err(err, STK_ECORRUPT, "%s: is not a part manifest", file);
            }
            if (!rc) nparts++;
        }
        stk__free(text);
        stk__free(file);
        if (rc) break;
    }
    closedir(d);
    if (!rc && nparts == 0)
        rc = stk__err(err, unfinished[0] ? STK_EINCOMPLETE : -ENOENT,
                      "%s: no finished parts to merge%s%s", path,
                      unfinished[0] ? "; an unfinished pack left " : "", unfinished);
    uint32_t count = want ? want : nparts ? parts[0].part_count : 0;
    if (!rc && count == STK_PARTS_OPEN)
        rc = stk__err(err, -EINVAL,
                      "%s: the parts were written without their count (STK_PARTS_OPEN): "
                      "merge them giving their count (stk_merge_parts; stoker.merge(path, parts=N))",
                      path);
    if (!rc) {
        /* Sort by part index (insertion sort: parts are few). */
        for (size_t i = 1; i < nparts; i++)
            for (size_t j = i; j > 0 && parts[j - 1].part_index > parts[j].part_index; j--) {
                stk__manifest t = parts[j];
                parts[j] = parts[j - 1];
                parts[j - 1] = t;
            }
        char what[512];
        for (size_t i = 0; i < nparts && !rc; i++) {
            if (parts[i].part_index >= count)
                rc = stk__err(err, STK_EMISMATCH,
                              "%s: part %u (part-%05u.json) is beyond the %u parts merged: "
                              "a part of another write? remove it, or merge with its count",
                              path, parts[i].part_index, parts[i].part_index, count);
            else if (part_count_of(&parts[i], want) != count)
                rc = stk__err(err, STK_ESCHEMA,
                              "%s: part %u says there are %u parts, the merge %u",
                              path, parts[i].part_index, parts[i].part_count, count);
            else if (i && parts[i].part_index == parts[i - 1].part_index)
                rc = stk__err(err, STK_ECORRUPT, "%s: part %u appears twice", path,
                              parts[i].part_index);
            else if ((parts[i].inputs || parts[0].inputs) &&
                     (!parts[i].inputs || !parts[0].inputs ||
                      strcmp(parts[i].inputs, parts[0].inputs) != 0) &&
                     stk__inputs_diff(parts[0].inputs_list, parts[i].inputs_list, what,
                                      sizeof what))
                rc = stk__err(err, STK_EMISMATCH,
                              "%s: part %u was packed from other inputs than part %u: %s "
                              "between them; pack every part from the same files with the "
                              "same options",
                              path, parts[i].part_index, parts[0].part_index, what);
            else if ((parts[i].inputs || parts[0].inputs) &&
                     (!parts[i].inputs || !parts[0].inputs ||
                      strcmp(parts[i].inputs, parts[0].inputs) != 0))
                rc = stk__err(err, STK_EMISMATCH,
                              "%s: part %u was packed from other inputs than part %u (%s): "
                              "pack every part from the same files with the same options",
                              path, parts[i].part_index, parts[0].part_index,
                              parts[i].inputs && parts[0].inputs ? "their inputs differ"
                                                                 : "only one recorded them");
            else if (stk__schema_hash(parts[i].fields, parts[i].nfields) !=
                         stk__schema_hash(parts[0].fields, parts[0].nfields) ||
                     parts[i].align != parts[0].align ||
                     parts[i].block_size != parts[0].block_size)
                rc = stk__err(err, STK_ESCHEMA,
                              "%s: part %u has a different schema or layout than "
                              "part %u",
                              path, parts[i].part_index, parts[0].part_index);
        }
        if (!rc && nparts != count) {
            uint32_t missing = 0;
            for (size_t i = 0; i < nparts; i++, missing++)
                if (parts[i].part_index != missing) break;
            rc = stk__err(err, STK_EINCOMPLETE,
                          "%s: %zu of %u parts are finished; part %u "
                          "(part-%05u.json) is missing",
                          path, nparts, count, missing, missing);
        }
    }
    if (!rc) {
        stk__manifest m = parts[0];
        m.is_part = 0;
        m.part_index = 0;
        m.part_count = 1;
        m.inputs_list = NULL; /* a part's own, for merges; the dataset needs none */
        m.records = 0;
        m.nshards = 0;
        for (size_t i = 0; i < nparts; i++) {
            m.version = STK__MAX(m.version, parts[i].version);
            m.records += parts[i].records;
            m.nshards += parts[i].nshards;
        }
        m.shards = stk__calloc(m.nshards ? m.nshards : 1, sizeof *m.shards);
        /* The parts' statistics joined in part order (Chan's update of
         * count, mean and M2; counts, minima and maxima exactly): those of
         * the whole, as one writer would have gathered them, to rounding.
         * A part without them (written by an older stoker, or resumed
         * without them) leaves the dataset without. */
        m.stats = NULL;
        bool all = true;
        for (size_t i = 0; i < nparts; i++) all = all && parts[i].stats;
        if (m.shards && all && stk__stats_new(m.fields, m.nfields, false, &m.stats) == 0)
            for (size_t i = 0; i < nparts; i++) stk__stats_merge(m.stats, parts[i].stats);
        if (!m.shards || (all && !m.stats)) {
            rc = stk__err(err, -ENOMEM, "out of memory");
        } else {
            size_t k = 0;
            for (size_t i = 0; i < nparts; i++)
                for (size_t j = 0; j < parts[i].nshards; j++) m.shards[k++] = parts[i].shards[j];
            rc = stk__publish(path, STK__MANIFEST, &m, true, err);
        }
        stk__free(m.shards);
        stk__stats_free(m.stats);
        if (!rc) {
            for (uint32_t i = 0; i < count; i++) {
                char name[32];
                snprintf(name, sizeof name, "part-%05u.json", i);
                char *p = stk__path_join(path, name);
                if (p) unlink(p);
                stk__free(p);
            }
            stk__fsync_dir(path);
        }
    }
    for (size_t i = 0; i < nparts; i++) stk__manifest_clear(&parts[i]);
    stk__free(parts);
    return rc;
}

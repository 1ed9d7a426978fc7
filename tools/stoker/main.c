/*
 * stoker: the command line.  This file holds the table of commands, the
 * top-level --help and --version, and the dispatch; each command lives in
 * a file of its own beside it, and what they share in cli.c.  The command
 * line uses only the public API in stoker.h.
 */
#include "cli.h"

#include <stdio.h>
#include <string.h>

static int cmd_version(int argc, char **argv) {
    (void)argc;
    (void)argv;
    printf("stoker %s (format version %d)\n", stk_version(), STK_FORMAT_VERSION);
    return 0;
}

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary; /* one line of the top-level help */
} command;

static const command commands[] = {
    {"pack", cmd_pack, "pack .npy, Parquet, Arrow or HDF5 files into a dataset"},
    {"merge", cmd_merge, "join the parts of a split pack"},
    {"index", cmd_index, "index .npy, WAV, HDF5 or raw files to read them in place"},
    {"inspect", cmd_inspect, "show a dataset's schema, shards and counts"},
    {"verify", cmd_verify, "check every checksum of a dataset"},
    {"cat", cmd_cat, "print one record"},
    {"read", cmd_read, "iterate batches and report the throughput"},
    {"doctor", cmd_doctor, "where the loader's time goes, and whether a run is input-bound"},
    {"cache", cmd_cache, "show, fill or clear the local cache of remote datasets"},
    {"push", cmd_push, "upload a dataset to an object store, manifest last"},
    {"version", cmd_version, "print the library and format versions"},
};

static void print_help(FILE *out) {
    fputs("Usage: stoker COMMAND [options]\n"
          "\n"
          "stoker packs training data into indexed shards and reads it back fast.\n"
          "\n"
          "Commands:\n",
          out);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-9s %s\n", commands[i].name, commands[i].summary);
    fputs("\n"
          "Run 'stoker COMMAND --help' for a command's options and an example.\n"
          "\n"
          "A dataset may be a directory, an in-place index, or the URL of a dataset in\n"
          "an object store (s3://bucket/prefix, https://host/path), read through a\n"
          "local cache: --cache-dir DIR (any command; default $STOKER_CACHE_DIR, else\n"
          "~/.cache/stoker), --cache-budget SIZE (the disk the dataset's cache may take;\n"
          "default $STOKER_CACHE_BUDGET, else the free space less 5%; 0 streams).\n"
          "\n"
          "Example:\n"
          "  stoker pack --from npy series/ -o series.stk && stoker verify series.stk\n",
          out);
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") ||
        !strcmp(argv[1], "help")) {
        print_help(argc < 2 ? stderr : stdout);
        return argc < 2 ? EXIT_ERROR : 0;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--version")) cmd = "version";
    /* --cache-dir and --cache-budget are every command's: taken out before
     * the command sees its arguments. */
    int kept = 2;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--cache-dir")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "%s %s: error: --cache-dir needs a value\n", prog, cmd);
                return EXIT_ERROR;
            }
            cli_cache_dir = argv[++i];
        } else if (!strncmp(argv[i], "--cache-dir=", 12)) {
            cli_cache_dir = argv[i] + 12;
        } else if (!strcmp(argv[i], "--cache-budget") || !strncmp(argv[i], "--cache-budget=", 15)) {
            const char *v = argv[i][14] == '=' ? argv[i] + 15 : i + 1 < argc ? argv[++i] : NULL;
            if (!v) {
                fprintf(stderr, "%s %s: error: --cache-budget needs a value\n", prog, cmd);
                return EXIT_ERROR;
            }
            cli_cache_budget = opt_size(cmd, "--cache-budget", v, 0, UINT64_MAX - 1);
        } else {
            argv[kept++] = argv[i];
        }
    }
    argc = kept;
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(cmd, commands[i].name)) return commands[i].run(argc - 2, argv + 2);
    fprintf(stderr, "%s: unknown command '%s'\n\n", prog, cmd);
    print_help(stderr);
    return EXIT_ERROR;
}

/*
 * driver.c - replays fuzz inputs without libFuzzer: every file in the
 * directories (or the files) named on the command line, or in the corpus
 * directory the binary was built with, goes once through
 * LLVMFuzzerTestOneInput. `make test` runs it on the committed corpus, so
 * the targets and their seeds keep working without clang.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/fuzz/fuzz_common.h"

static int run_file(const char *path)
{
        FILE *f = fopen(path, "rb");
        uint8_t *buf;
        long n;

        if (!f)
                return -1;
        fseek(f, 0, SEEK_END);
        n = ftell(f);
        rewind(f);
        buf = malloc(n > 0 ? (size_t)n : 1);
        if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
                fclose(f);
                free(buf);
                return -1;
        }
        fclose(f);
        LLVMFuzzerTestOneInput(buf, (size_t)n);
        free(buf);
        return 0;
}

static int run_path(const char *path, int *count)
{
        struct stat st;
        struct dirent *e;
        DIR *d;

        if (stat(path, &st) != 0) {
                fprintf(stderr, "fuzz driver: %s: not found\n", path);
                return -1;
        }
        if (!S_ISDIR(st.st_mode)) {
                (*count)++;
                return run_file(path);
        }
        d = opendir(path);
        if (!d)
                return -1;
        while ((e = readdir(d))) {
                char sub[4096];

                if (e->d_name[0] == '.')
                        continue;
                snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name);
                if (run_path(sub, count)) {
                        closedir(d);
                        return -1;
                }
        }
        closedir(d);
        return 0;
}

int main(int argc, char **argv)
{
        int count = 0;

#ifdef FUZZ_CORPUS
        if (argc < 2 && run_path(FUZZ_CORPUS, &count))
                return 1;
#endif
        for (int i = 1; i < argc; i++)
                if (run_path(argv[i], &count))
                        return 1;
        printf("%s: %d inputs replayed, none crashed\n", argv[0], count);
        return count ? 0 : 1;
}

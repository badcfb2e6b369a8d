/*
 * test/fuzz/replay.c — runs a fuzz target once over saved inputs, without libFuzzer.
 * `make test` builds every target with this main and the sanitizers and replays the committed corpus
 * and crashers (test/fuzz/corpus/<target>/, test/fuzz/crashers/<target>/): a regression suite of
 * hostile files that needs no clang. Arguments are files or directories (not recursive); without
 * arguments it replays those two directories of its target (FUZZ_NAME, set by the Makefile).
 */
#include <dirent.h>
#include <fcntl.h>
#include <sanitizer/common_interface_defs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
static FILE* report;  // the real stderr

static int replay_file(const char* path) {
    FILE* fp = fopen(path, "rb");
    if (fp == NULL) { fprintf(report, "replay: cannot open %s\n", path); exit(2); }
    fseek(fp, 0, SEEK_END);
    long size = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t* data = malloc(size > 0 ? (size_t)size : 1);
    if (data == NULL || fread(data, 1, (size_t)size, fp) != (size_t)size) { fprintf(report, "replay: cannot read %s\n", path); exit(2); }
    fclose(fp);
    LLVMFuzzerTestOneInput(data, (size_t)size);
    free(data);
    return 1;
}

int main(int argc, char** argv) {
    // the loaders' "error: ..." lines (most inputs are rejected) go to /dev/null, sanitizer reports to
    // the real stderr
    int report_fd = dup(2), null_fd = open("/dev/null", O_WRONLY);
    if (report_fd < 0 || null_fd < 0 || dup2(null_fd, 2) < 0) { perror("replay: redirecting stderr"); return 2; }
    __sanitizer_set_report_fd((void*)(intptr_t)report_fd);
    report = fdopen(report_fd, "w");
    char* defaults[3] = { argv[0], "test/fuzz/corpus/" FUZZ_NAME, "test/fuzz/crashers/" FUZZ_NAME };
    if (argc == 1) { argc = 3; argv = defaults; }
    int n = 0;
    for (int a = 1; a < argc; a++) {
        struct stat st;
        if (stat(argv[a], &st) != 0) {
            if (a > 1 && argv == defaults) { continue; }  // no crashers saved for this target
            fprintf(report, "replay: no such file %s\n", argv[a]);
            return 2;
        }
        if (!S_ISDIR(st.st_mode)) { n += replay_file(argv[a]); continue; }
        DIR* dir = opendir(argv[a]);
        struct dirent* e;
        while (dir != NULL && (e = readdir(dir)) != NULL) {
            if (e->d_name[0] == '.') { continue; }  // skips . .. and .gitkeep
            char path[4096];
            snprintf(path, sizeof(path), "%s/%s", argv[a], e->d_name);
            n += replay_file(path);
        }
        if (dir != NULL) { closedir(dir); }
    }
    if (n == 0) { fprintf(report, "replay %s: no inputs\n", argv[0]); return 2; }
    printf("replay %s: %d inputs, no crash\n", argv[0], n);
    return 0;
}

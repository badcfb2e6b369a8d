/*
 * test/fuzz/replay.c — runs a fuzz target once over saved inputs, without libFuzzer.
 * `make test` builds every target with this main and the sanitizers and replays the committed corpus
 * and crashers (test/fuzz/corpus/<target>/, test/fuzz/crashers/<target>/): a regression suite of
 * hostile files that needs no clang. Arguments are files or directories (not recursive); without
 * arguments it replays those two directories of its target (FUZZ_NAME, set by the Makefile).
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

static int replay_file(const char* path) {
    FILE* fp = fopen(path, "rb");
    if (fp == NULL) { fprintf(stderr, "replay: cannot open %s\n", path); exit(2); }
    fseek(fp, 0, SEEK_END);
    long size = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t* data = malloc(size > 0 ? (size_t)size : 1);
    if (data == NULL || fread(data, 1, (size_t)size, fp) != (size_t)size) { fprintf(stderr, "replay: cannot read %s\n", path); exit(2); }
    fclose(fp);
    fprintf(stderr, "replay: input %s\n", path);
    LLVMFuzzerTestOneInput(data, (size_t)size);
    free(data);
    return 1;
}

static int replay_all(int argc, char** argv) {
    char* defaults[3] = { argv[0], "test/fuzz/corpus/" FUZZ_NAME, "test/fuzz/crashers/" FUZZ_NAME };
    if (argc == 1) { argc = 3; argv = defaults; }
    int n = 0;
    for (int a = 1; a < argc; a++) {
        struct stat st;
        if (stat(argv[a], &st) != 0) {
            if (a > 1 && argv == defaults) { continue; }  // no crashers saved for this target
            fprintf(stderr, "replay: no such file %s\n", argv[a]);
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
    if (n == 0) { fprintf(stderr, "replay %s: no inputs\n", argv[0]); return 2; }
    printf("replay %s: %d inputs, no crash\n", argv[0], n);
    return 0;
}

// the replay runs in a child whose stderr comes back through a pipe: the loaders' "error: ..." lines
// (most inputs are rejected, as they should be) are dropped, everything else (a sanitizer report) is
// passed on, and a failure names the input it happened on
int main(int argc, char** argv) {
    int fds[2];
    if (pipe(fds) != 0) { perror("replay: pipe"); return 2; }
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) { perror("replay: fork"); return 2; }
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        close(fds[1]);
        return replay_all(argc, argv);
    }
    close(fds[1]);
    FILE* child = fdopen(fds[0], "r");
    char line[4096], current[4096] = "(none)";
    while (fgets(line, sizeof(line), child) != NULL) {
        if (strncmp(line, "replay: input ", 14) == 0) { snprintf(current, sizeof(current), "%s", line + 14); continue; }
        if (strncmp(line, "error: ", 7) != 0) { fputs(line, stderr); }
    }
    int status;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "replay %s: FAILED on input %s", argv[0], current);
        return 1;
    }
    return 0;
}

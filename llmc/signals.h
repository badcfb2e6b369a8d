/*
 * llmc/signals.h — stopping a run by hand. The first SIGINT or SIGTERM asks the run to stop after the
 * step in progress, with a checkpoint; a second one stops at once (the last complete checkpoint stays
 * valid: checkpoints are atomic, with DONE markers). On the way out the trainer prints the exact
 * command line that continues the run, quoted so that it survives a paste into a shell.
 */
#ifndef LLMC_SIGNALS_H
#define LLMC_SIGNALS_H

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>


static volatile sig_atomic_t stop_signal = 0;

static inline void signals_on_signal(int sig) {
    if (stop_signal != 0) {
        static const char msg[] = "\nsecond signal: stopping now, without a checkpoint\n";
        ssize_t w = write(STDERR_FILENO, msg, sizeof(msg) - 1);
        (void)w;
        _exit(128 + sig);
    }
    stop_signal = sig;
    static const char msg[] = "\nsignal: stopping after this step and writing a checkpoint (again: stop at once)\n";
    ssize_t w = write(STDOUT_FILENO, msg, sizeof(msg) - 1);
    (void)w;
}

static inline void signals_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = signals_on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

static inline int signals_stop_requested(void) { return stop_signal != 0; }

// s in single quotes for sh, each ' as '\'' ; plain words as they are
static inline void signals_print_shell_word(FILE* out, const char* s) {
    int plain = s[0] != '\0';
    for (const char* p = s; *p; p++) {
        if (!(('a' <= *p && *p <= 'z') || ('A' <= *p && *p <= 'Z') || ('0' <= *p && *p <= '9') || strchr("-_./=:,+@%", *p))) { plain = 0; }
    }
    if (plain) { fputs(s, out); return; }
    fputc('\'', out);
    for (const char* p = s; *p; p++) {
        if (*p == '\'') { fputs("'\\''", out); } else { fputc(*p, out); }
    }
    fputc('\'', out);
}

// the command line that continues this run: the same arguments, -y 1, quoted so that it survives a paste
static inline void signals_print_resume_hint(int step, const char* output_dir, int argc, char** argv) {
    printf("stopped by signal after step %d.", step);
    if (output_dir == NULL) { printf(" No -o given: nothing saved.\n"); return; }
    printf(" Resume with the same flags plus -y 1:\n ");
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "-y") == 0) { i++; continue; }
        putchar(' ');
        signals_print_shell_word(stdout, argv[i]);
    }
    printf(" -y 1\n");
    fflush(stdout);
}

#endif // LLMC_SIGNALS_H

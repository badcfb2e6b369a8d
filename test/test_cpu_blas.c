/*
 * test/test_cpu_blas.c — llmc/cpu_blas.h: CPU features -> OpenBLAS core, the ranking of core names, the
 * re-exec decision (a user's value wins, never twice), and end to end that ./train_gpt2 and
 * build/bench_sgemm re-execute exactly once and run on the core the CPU supports when OpenBLAS (made to look
 * like it) chose the SSE3 kernel.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llmc/cpu_blas.h"

static CpuFeatures feats(int amd, int avx2, int fma, int avx512, int bf16) {
    CpuFeatures f = {amd, avx2, fma, avx512, bf16};
    return f;
}

static void expect_core(CpuFeatures f, const char* want) {
    const char* got = blas_core_for(&f);
    if (want == NULL) {
        cr_expect_null(got, "expected no core, got %s", got);
    } else {
        cr_expect_not_null(got, "expected %s, got none", want);
        if (got != NULL) { cr_expect_str_eq(got, want); }
    }
}

Test(cpu_blas, features_to_core) {
    expect_core(feats(0, 1, 1, 1, 1), "Cooperlake");   // Cooper Lake, Sapphire Rapids, Granite Rapids
    expect_core(feats(1, 1, 1, 1, 1), "Cooperlake");   // Zen 4: the same instructions
    expect_core(feats(0, 1, 1, 1, 0), "SkylakeX");     // Skylake-SP, Cascade Lake, Ice Lake
    expect_core(feats(0, 1, 1, 0, 0), "Haswell");      // Haswell .. Alder Lake without AVX-512
    expect_core(feats(1, 1, 1, 0, 0), "Zen");          // Zen 1-3
    expect_core(feats(0, 1, 0, 0, 0), NULL);           // AVX2 without FMA: leave OpenBLAS alone
    expect_core(feats(0, 0, 0, 0, 0), NULL);
}

Test(cpu_blas, core_ranking) {
    cr_expect_lt(blas_core_rank("Prescott"), blas_core_rank("Sandybridge"));
    cr_expect_lt(blas_core_rank("Sandybridge"), blas_core_rank("Haswell"));
    cr_expect_eq(blas_core_rank("Haswell"), blas_core_rank("Zen"));
    cr_expect_lt(blas_core_rank("Zen"), blas_core_rank("SkylakeX"));
    cr_expect_lt(blas_core_rank("SkylakeX"), blas_core_rank("Cooperlake"));
    cr_expect_eq(blas_core_rank("cooperlake"), blas_core_rank("Cooperlake"), "OpenBLAS's names are case-insensitive");
    cr_expect_gt(blas_core_rank("SapphireRapids"), blas_core_rank("Cooperlake"), "an unknown (newer) name is never overridden");
    cr_expect_eq(blas_core_rank(NULL), 0);
}

Test(cpu_blas, plan) {
    CpuFeatures spr = feats(0, 1, 1, 1, 1), zen3 = feats(1, 1, 1, 0, 0), old = feats(0, 0, 0, 0, 0);
    // the case: a new Xeon, OpenBLAS fell back to Prescott
    BlasPlan p = cpu_blas_plan(NULL, NULL, NULL, NULL, "Prescott", &spr);
    cr_expect_str_eq(p.set_core, "Cooperlake");
    cr_expect(p.set_wait && p.reexec);
    // OpenBLAS chose well: only the wait policy
    p = cpu_blas_plan(NULL, NULL, NULL, NULL, "Zen", &zen3);
    cr_expect_null(p.set_core);
    cr_expect(p.set_wait && p.reexec);
    // OpenBLAS chose better than our table knows: left alone
    p = cpu_blas_plan(NULL, "passive", NULL, NULL, "SapphireRapids", &spr);
    cr_expect(p.set_core == NULL && !p.set_wait && !p.reexec);
    // an explicit OPENBLAS_CORETYPE wins, even a weaker one
    p = cpu_blas_plan("Haswell", "active", NULL, NULL, "Haswell", &spr);
    cr_expect(p.set_core == NULL && !p.reexec);
    // an explicit wait policy or spin count wins
    p = cpu_blas_plan(NULL, NULL, "10000", NULL, "Cooperlake", &spr);
    cr_expect(!p.set_wait && !p.reexec);
    // a CPU without AVX2+FMA: nothing to improve
    p = cpu_blas_plan(NULL, "passive", NULL, NULL, "Prescott", &old);
    cr_expect(!p.reexec);
    // the re-executed program (marker set) never decides again, whatever OpenBLAS reports
    p = cpu_blas_plan(NULL, NULL, NULL, "core:Prescott", "Prescott", &spr);
    cr_expect(p.set_core == NULL && !p.set_wait && !p.reexec);
}

// runs `cmd` (sh), returns its stdout+stderr (malloc'd) and sets *rc
static char* run_capture(const char* cmd, int* rc) {
    FILE* fp = popen(cmd, "r");
    cr_assert_not_null(fp, "popen failed: %s", cmd);
    size_t cap = 1 << 16, n = 0;
    char* buf = (char*)calloc(cap, 1);
    size_t got;
    while ((got = fread(buf + n, 1, cap - 1 - n, fp)) > 0) { n += got; }
    *rc = pclose(fp);
    return buf;
}

static int count(const char* text, const char* needle) {
    int k = 0;
    for (const char* s = strstr(text, needle); s != NULL; s = strstr(s + 1, needle)) { k++; }
    return k;
}

// a clean environment for the child: none of our variables inherited from this (re-executed) test binary
#define CLEAN_ENV "env -u LLMC_BLAS_REEXEC -u OPENBLAS_CORETYPE -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT LLMC_BLAS_VERBOSE=1 "

Test(cpu_blas, reexec_at_most_once_trainer, .timeout = 60) {  // a re-exec loop ends in the timeout
    int rc;
    char* out = run_capture(CLEAN_ENV "LLMC_BLAS_TEST_CORE=Prescott ./train_gpt2 -h 2>&1", &rc);
    cr_expect_eq(rc, 0, "train_gpt2 -h failed:\n%s", out);
    cr_expect_eq(count(out, "cpu_blas: re-exec"), 1, "expected one re-exec:\n%s", out);
    cr_expect_gt(count(out, "usage:"), 0, "%s", out);
    free(out);
    // everything set by the user: no re-exec at all
    out = run_capture(CLEAN_ENV "OPENBLAS_CORETYPE=Haswell OMP_WAIT_POLICY=active ./train_gpt2 -h 2>&1", &rc);
    cr_expect_eq(count(out, "cpu_blas: re-exec"), 0, "%s", out);
    free(out);
}

Test(cpu_blas, reexec_sets_the_supported_core, .timeout = 60) {
    CpuFeatures f = cpu_features_detect();
    const char* want = blas_core_for(&f);
    int rc;
    char* out = run_capture(CLEAN_ENV "LLMC_BLAS_TEST_CORE=Prescott build/bench_sgemm 64 1 2>&1", &rc);
    cr_expect_eq(rc, 0, "bench_sgemm failed:\n%s", out);
    cr_expect_eq(count(out, "cpu_blas: re-exec"), 1, "expected one re-exec:\n%s", out);
    if (want != NULL) {  // the run reports the core we set, and what OpenBLAS had chosen
        char expect[96];
        snprintf(expect, sizeof(expect), "%s (auto, was Prescott)", want);
        cr_expect_gt(count(out, expect), 0, "expected '%s' in:\n%s", expect, out);
    }
    free(out);
}

/*
 * llmc/cpu_blas.h — the environment our CPU programs run in: the right OpenBLAS kernel for this CPU and
 * the OpenMP wait policy, set by cpu_blas_init(argc, argv) on the first line of main() (train_gpt2,
 * dev/bench_gpt2, dev/bench_sgemm). CPU only.
 * Why: a DYNAMIC_ARCH OpenBLAS picks its kernel from the CPU models it knows. On a CPU newer than the
 * library (e.g. Debian's 0.3.21 on a recent Xeon) it falls back to its SSE3 kernel, 4-7x slower. Both
 * OpenBLAS (OPENBLAS_CORETYPE) and libgomp (OMP_WAIT_POLICY, GOMP_SPINCOUNT) read their settings when they
 * load, before any code of ours runs, so the only way to change them is to set them and execute the
 * program again: at most once, the marker LLMC_BLAS_REEXEC says it was done. A value the user set wins.
 * Then the products as the trainer threads them (sgemm, sgemm_part): OpenBLAS single-threaded inside
 * OpenMP's one pool of threads.
 * Debugging: LLMC_BLAS_VERBOSE=1 prints the decision on stderr; LLMC_BLAS_TEST_CORE=name makes the setup
 * believe OpenBLAS chose that core (tests of the re-exec on CPUs where OpenBLAS chooses well).
 */
#ifndef LLMC_CPU_BLAS_H
#define LLMC_CPU_BLAS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <cblas.h>
#include <omp.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

// OpenBLAS's introspection (exported by every OpenBLAS since 0.2; not every cblas.h declares them)
char* openblas_get_corename(void);
char* openblas_get_config(void);

// what the CPU and the OS (saved register state) support, as the kernel choice needs it
typedef struct {
    int amd;           // vendor AuthenticAMD / HygonGenuine (OpenBLAS names its AVX2 kernel Zen there)
    int avx2, fma;     // with the OS saving the ymm state
    int avx512;        // AVX-512 F, DQ, BW, VL, with the OS saving the zmm state (OpenBLAS's SkylakeX kernel)
    int avx512_bf16;   // and AVX512_BF16 (Cooperlake)
} CpuFeatures;

static inline CpuFeatures cpu_features_detect(void) {
    CpuFeatures f = {0, 0, 0, 0, 0};
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d)) { return f; }
    unsigned max_leaf = a;
    f.amd = (b == 0x68747541u /* "Auth" */) || (b == 0x6f677948u /* "Hygo" */);
    __get_cpuid(1, &a, &b, &c, &d);
    int fma = (c >> 12) & 1, osxsave = (c >> 27) & 1, avx = (c >> 28) & 1;
    if (!osxsave || !avx) { return f; }
    unsigned xcr0_lo, xcr0_hi;
    __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    int os_ymm = (xcr0_lo & 0x6) == 0x6, os_zmm = (xcr0_lo & 0xe6) == 0xe6;
    if (max_leaf < 7 || !os_ymm) { return f; }
    __cpuid_count(7, 0, a, b, c, d);
    f.avx2 = (b >> 5) & 1;
    f.fma = fma;
    int avx512f = (b >> 16) & 1, avx512dq = (b >> 17) & 1, avx512bw = (b >> 30) & 1, avx512vl = (b >> 31) & 1;
    f.avx512 = os_zmm && avx512f && avx512dq && avx512bw && avx512vl;
    __cpuid_count(7, 1, a, b, c, d);
    f.avx512_bf16 = f.avx512 && ((a >> 5) & 1);
#endif
    return f;
}

// the best OpenBLAS 0.3.21 kernel the CPU can run, or NULL when it has nothing past AVX (we then leave
// OpenBLAS's choice alone)
static inline const char* blas_core_for(const CpuFeatures* f) {
    if (f->avx512_bf16) { return "Cooperlake"; }
    if (f->avx512) { return "SkylakeX"; }
    if (f->avx2 && f->fma) { return f->amd ? "Zen" : "Haswell"; }
    return NULL;
}

// how good an OpenBLAS core name's sgemm is, by the instructions it uses: 0 SSE-era, 1 AVX, 2 AVX2+FMA,
// 3 AVX-512, 4 AVX-512 with BF16. A name we do not know (a newer OpenBLAS) ranks above all: never override it.
static inline int blas_core_rank(const char* name) {
    static const struct { const char* name; int rank; } ranks[] = {
        {"Cooperlake", 4}, {"SkylakeX", 3}, {"Haswell", 2}, {"Zen", 2}, {"Sandybridge", 1},
        {"Bulldozer", 1}, {"Piledriver", 1}, {"Steamroller", 1}, {"Excavator", 1},
        {"Unknown", 0}, {"Katmai", 0}, {"Coppermine", 0}, {"Northwood", 0}, {"Prescott", 0},
        {"Banias", 0}, {"Atom", 0}, {"Core2", 0}, {"Penryn", 0}, {"Dunnington", 0}, {"Nehalem", 0},
        {"Athlon", 0}, {"Opteron", 0}, {"Opteron(SSE3)", 0}, {"Barcelona", 0}, {"Nano", 0},
        {"Bobcat", 0},
    };
    if (name == NULL) { return 0; }
    for (size_t i = 0; i < sizeof(ranks) / sizeof(ranks[0]); i++) {
        if (strcasecmp(name, ranks[i].name) == 0) { return ranks[i].rank; }
    }
    return 100;
}

// The OpenMP wait policy we set when the user set neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT: idle workers
// sleep. On small shared machines a spinning worker burns the time slice its partner needs; passive is
// within noise of the best policy on a quiet machine and the best under load (scripts/bench_threads.sh,
// docs/correctness.md).
#define LLMC_WAIT_POLICY_VAR "OMP_WAIT_POLICY"
#define LLMC_WAIT_POLICY_VALUE "passive"

// what to do before main: the core to set (NULL: none), whether to set the wait policy, re-exec or not
typedef struct {
    const char* set_core;
    int set_wait;
    int reexec;
} BlasPlan;

// Pure: the decision from the environment's values (NULL = unset), OpenBLAS's choice and the CPU.
static inline BlasPlan cpu_blas_plan(const char* env_core, const char* env_wait, const char* env_spin,
                                     const char* env_marker, const char* chosen_core, const CpuFeatures* f) {
    BlasPlan p = {NULL, 0, 0};
    if (env_marker != NULL) { return p; }  // this is the re-executed program: never a second time
    const char* want = blas_core_for(f);
    if (env_core == NULL && want != NULL && blas_core_rank(want) > blas_core_rank(chosen_core)) { p.set_core = want; }
    p.set_wait = env_wait == NULL && env_spin == NULL;
    p.reexec = p.set_core != NULL || p.set_wait;
    return p;
}

static inline const char* blas_chosen_core(void) {
    const char* test_core = getenv("LLMC_BLAS_TEST_CORE");
    return test_core != NULL ? test_core : openblas_get_corename();
}

// One line (< 50 characters) for config tables: "OpenBLAS 0.3.21 Cooperlake (auto, was Prescott)"
static inline const char* cpu_blas_describe(void) {
    static char out[160];
    char version[64] = "OpenBLAS";
    const char* config = openblas_get_config();
    if (config != NULL) {  // "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ...": the first two words
        const char* sp = strchr(config, ' ');
        sp = sp != NULL ? strchr(sp + 1, ' ') : NULL;
        size_t n = sp != NULL ? (size_t)(sp - config) : strlen(config);
        if (n >= sizeof(version)) { n = sizeof(version) - 1; }
        memcpy(version, config, n);
        version[n] = '\0';
    }
    const char* marker = getenv("LLMC_BLAS_REEXEC");
    const char* env_core = getenv("OPENBLAS_CORETYPE");
    char how[64] = "OpenBLAS default";
    if (marker != NULL && strncmp(marker, "core:", 5) == 0) {
        snprintf(how, sizeof(how), "auto, was %s", marker + 5);
    } else if (env_core != NULL) {
        snprintf(how, sizeof(how), "OPENBLAS_CORETYPE");
    }
    snprintf(out, sizeof(out), "%s %s (%s)", version, openblas_get_corename(), how);
    return out;
}

// The first call of main(), before any BLAS or OpenMP work: sets what the plan says and re-executes the
// program once with the same arguments; if the exec fails, the program carries on with what it has.
static inline void cpu_blas_init(int argc, char** argv) {
    (void)argc;
    const char* chosen = blas_chosen_core();
    CpuFeatures f = cpu_features_detect();
    BlasPlan p = cpu_blas_plan(getenv("OPENBLAS_CORETYPE"), getenv("OMP_WAIT_POLICY"), getenv("GOMP_SPINCOUNT"),
                               getenv("LLMC_BLAS_REEXEC"), chosen, &f);
    if (!p.reexec || argv == NULL) { return; }
    char marker[80] = "1";
    if (p.set_core != NULL) {
        setenv("OPENBLAS_CORETYPE", p.set_core, 1);
        snprintf(marker, sizeof(marker), "core:%s", chosen != NULL ? chosen : "?");
    }
    if (p.set_wait) { setenv(LLMC_WAIT_POLICY_VAR, LLMC_WAIT_POLICY_VALUE, 1); }
    setenv("LLMC_BLAS_REEXEC", marker, 1);
    if (getenv("LLMC_BLAS_VERBOSE") != NULL) {
        fprintf(stderr, "cpu_blas: re-exec (OpenBLAS core %s, CPU supports %s; set%s%s%s%s)\n",
                chosen != NULL ? chosen : "?", blas_core_for(&f) != NULL ? blas_core_for(&f) : "-",
                p.set_core != NULL ? " OPENBLAS_CORETYPE=" : "", p.set_core != NULL ? p.set_core : "",
                p.set_wait ? " " LLMC_WAIT_POLICY_VAR "=" : "", p.set_wait ? LLMC_WAIT_POLICY_VALUE : "");
    }
    fflush(NULL);
    execv("/proc/self/exe", argv);  // on failure, carry on as we are
}

// ----------------------------------------------------------------------------
// the products: one pool of threads. OpenBLAS runs single-threaded inside OpenMP's threads, each thread
// computing a fixed slice of the output, so no second pool of BLAS threads competes with OpenMP's for the
// cores, and results depend only on the thread count (the CPU trainer's layers call these).

static int blas_single_threaded = 0;
static inline void blas_init(void) {
    if (!blas_single_threaded) { openblas_set_num_threads(1); blas_single_threaded = 1; }
}

// [lo, hi) of thread tid's share of n items, boundaries on multiples of 16 (whole cache lines)
static inline void split_range(int n, int tid, int nth, int* lo, int* hi) {
    int blocks = (n + 15) / 16;
    *lo = (int)((long)blocks * tid / nth) * 16;
    *hi = (int)((long)blocks * (tid + 1) / nth) * 16;
    if (*lo > n) { *lo = n; }
    if (*hi > n) { *hi = n; }
}

// C (M,N) = alpha op(A) op(B) + beta C, row-major; op(X) = X^T when transX. The larger of M and N is
// split over the threads: sgemm_part computes thread tid's slice (its rows, or its columns), inside a
// parallel region, so that callers can put several products and their elementwise work in one region.
// thread tid's block of an (M,N) output: rows [r0,r1) x columns [c0,c1), split along the larger side
static inline void sgemm_slice(int tid, int nth, int M, int N, int* r0, int* r1, int* c0, int* c1) {
    int lo, hi;
    split_range(N > M ? N : M, tid, nth, &lo, &hi);
    *r0 = N > M ? 0 : lo; *r1 = N > M ? M : hi;
    *c0 = N > M ? lo : 0; *c1 = N > M ? hi : N;
}
static inline void sgemm_part(int tid, int nth, int transA, int transB, int M, int N, int K, float alpha,
                              const float* A, int lda, const float* B, int ldb, float beta, float* C, int ldc) {
    enum CBLAS_TRANSPOSE ta = transA ? CblasTrans : CblasNoTrans, tb = transB ? CblasTrans : CblasNoTrans;
    int r0, r1, c0, c1;
    sgemm_slice(tid, nth, M, N, &r0, &r1, &c0, &c1);
    if (r1 <= r0 || c1 <= c0) { return; }
    const float* a = transA ? A + r0 : A + (size_t)r0 * lda;
    const float* b = transB ? B + (size_t)c0 * ldb : B + c0;
    cblas_sgemm(CblasRowMajor, ta, tb, r1 - r0, c1 - c0, K, alpha, a, lda, b, ldb, beta, C + (size_t)r0 * ldc + c0, ldc);
}

static inline void sgemm(int transA, int transB, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
                         int ldb, float beta, float* C, int ldc) {
    blas_init();
    #pragma omp parallel
    sgemm_part(omp_get_thread_num(), omp_get_num_threads(), transA, transB, M, N, K, alpha, A, lda, B, ldb,
               beta, C, ldc);
}


#endif // LLMC_CPU_BLAS_H

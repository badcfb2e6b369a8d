/*
 * llmc/cpu_dnnl.h — bf16 matrix multiplies on the CPU through oneDNN (train_gpt2 --precision bf16): bf16
 * operands, fp32 accumulation and fp32 output (or the output rounded to bf16), on CPUs that multiply bf16
 * pairs natively (avx512_bf16, AMX). What it defines: the rows' conversion to bf16 (llmc/bf16.h's rounding), the detection of
 * native bf16 dot products (with a test override), and DnnlGemm, one oneDNN matmul primitive (or a batch of
 * same-shaped products) for one fixed shape and operand layout, created once at start-up and executed with
 * fresh data pointers each call.
 * Why fixed shapes: a primitive's JIT kernels and blocking are chosen for its shape; creating them takes
 * milliseconds and allocates, so the training loop only executes them (and oneDNN's scratch space is ours,
 * one buffer shared by all primitives: scratchpad mode "user").
 * oneDNN is optional: built without it (no LLMC_DNNL), everything here except the rounding and the CPU
 * check compiles to stubs, and dnnl_available() says so.
 * Debian's libdnnl2 runs on the OpenMP runtime (DNNL_CPU_RUNTIME = OMP), so its threads are ours: the
 * primitives must be executed outside a parallel region, and use omp_get_max_threads() threads.
 * Test overrides: LLMC_BF16_TEST_NO_BF16=1 makes cpu_has_native_bf16() answer 0 (a CPU without bf16).
 * LLMC_BF16_TEST_REFERENCE=1 computes every product with the reference instead of oneDNN: the bf16 operands
 * widened to fp32 (exactly) and multiplied by an OpenBLAS SGEMM (fp32 accumulation, in another order than
 * oneDNN's), and answers 1 there. It is slower than fp32 and exists so that the bf16 path around the
 * products (roundings, fused passes, the kept bf16 activations) runs and is tested, bit for bit from commit
 * to commit, on a CPU without bf16, and so that oneDNN's products can be checked against it where there is.
 */
#ifndef LLMC_CPU_DNNL_H
#define LLMC_CPU_DNNL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>
#include "llmc/utils.h"
#include "llmc/cpu_blas.h"  // cpu_features_detect
#include "llmc/bf16.h"      // bf16, bf16_from_float
#ifdef LLMC_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

// rows (n, cols) of src, row stride lds, into dst (n, cols) contiguous; for thread tid of nth (rows split)
static inline void bf16_convert_rows(bf16* dst, const float* src, size_t n, size_t cols, size_t lds, int tid, int nth) {
    size_t r0 = n * tid / nth, r1 = n * (tid + 1) / nth;
    for (size_t r = r0; r < r1; r++) {
        const float* s = src + r * lds;
        bf16* d = dst + r * cols;
        #pragma omp simd
        for (size_t i = 0; i < cols; i++) { d[i] = bf16_from_float(s[i]); }
    }
}

static inline int env_is_1(const char* name) {
    const char* v = getenv(name);
    return v != NULL && strcmp(v, "1") == 0;
}

// LLMC_BF16_TEST_REFERENCE=1: the products by the reference (a build with oneDNN only)
static inline int bf16_test_reference(void) {
#ifdef LLMC_DNNL
    return env_is_1("LLMC_BF16_TEST_REFERENCE");
#else
    return 0;
#endif
}

// native bf16 dot products (avx512_bf16; AMX-BF16 CPUs have it too), unless LLMC_BF16_TEST_NO_BF16=1; and
// under LLMC_BF16_TEST_REFERENCE=1, which multiplies bf16 on any CPU
static inline int cpu_has_native_bf16(void) {
    if (env_is_1("LLMC_BF16_TEST_NO_BF16")) { return 0; }
    if (bf16_test_reference()) { return 1; }
    CpuFeatures f = cpu_features_detect();
    return f.avx512_bf16;
}

#ifdef LLMC_DNNL
static inline int dnnl_available(void) { return 1; }

// one engine, and a stream and scratch buffer for the primitives that run on it (dnnl_ctx: made on the first
// dnnl_gemm_create; every product runs outside a parallel region, and oneDNN opens its own)
typedef struct {
    dnnl_engine_t engine;    // dnnl_ctx's, shared
    dnnl_stream_t stream;
    dnnl_memory_t scratch;   // user scratchpad, sized to the largest primitive's need
    void* scratch_data;
    size_t scratch_bytes;
} DnnlContext;
static DnnlContext dnnl_ctx = {0};

static inline void dnnlCheck(dnnl_status_t s, const char* what) {
    if (s != dnnl_success) { fatal("oneDNN: %s failed (status %d)", what, (int)s); }
}

static inline void dnnl_context_init(void) {
    if (dnnl_ctx.engine != NULL) { return; }
    dnnlCheck(dnnl_engine_create(&dnnl_ctx.engine, dnnl_cpu, 0), "engine");
    dnnlCheck(dnnl_stream_create(&dnnl_ctx.stream, dnnl_ctx.engine, dnnl_stream_default_flags), "stream");
}

// C (M,N) [+]= op(A) (M,K) · op(B) (K,N): A and B bf16 with leading dims lda, ldb (op(X) = X^T when transX,
// read through the strides: no explicit transpose), C row-major with leading dim ldc, in the form c_form:
// DNNL_C_SET C = (fp32), DNNL_C_ADD C += (fp32; oneDNN's sum post-op, exact fp32 addition), DNNL_C_BIAS C =
// (fp32) plus a bias (N) in fp32 given at each run (dnnl_gemm_run_bias; the same fp32 sum as DNNL_C_ADD onto
// C filled with the bias, without that pass over C); with DNNL_C_BF16 (alone, or with DNNL_C_BIAS) C gets the
// fp32 result rounded to bf16 (to nearest even, as bf16_from_float rounds).
// pack_b: each run reads B from a buffer that dnnl_gemm_pack_b filled with B reordered into the blocked
// layout the primitive asks for (dnnl_gemm_packed_bytes of it). A matmul given a plain B copies it into that
// layout itself, in pieces, on every call; packed once, a weight serves a whole step. The results are bit
// for bit those of the plain B (measured on oneDNN 2.6: B's layout changes where the values are read from,
// not the order of the sums; a transposed A does change it, so A stays as given), except on AMX for a K as
// long as a vocabulary, where the plain B's sums go in another order.
enum { DNNL_C_SET = 0, DNNL_C_ADD = 1, DNNL_C_BF16 = 2, DNNL_C_BIAS = 4 };  // flags
typedef struct {
    int ref;                 // LLMC_BF16_TEST_REFERENCE: no primitive; the shape below, for bf16_ref_run
    int batch, transA, transB, M, N, K, lda, ldb, ldc, c_form;
    dnnl_primitive_t prim;
    dnnl_memory_t a, b, c;   // descriptors bound to the data pointers of each call
    dnnl_memory_t bias;      // DNNL_C_BIAS: the bias (1, N), bound at each run; NULL otherwise
    dnnl_primitive_t pack;   // pack_b: the reorder from B as described into the primitive's layout
    dnnl_memory_t b_plain;   // pack_b: B as described, bound at each pack
    size_t packed_bytes;     // pack_b: the size of B in the primitive's layout
} DnnlGemm;

// dnnl_ctx's user scratchpad grows (at start-up only) to what the primitive pd needs
static inline void dnnl_scratch_reserve(const_dnnl_primitive_desc_t pd) {
    DnnlContext* cx = &dnnl_ctx;
    const dnnl_memory_desc_t* smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    size_t need = smd != NULL ? dnnl_memory_desc_get_size(smd) : 0;
    if (need <= cx->scratch_bytes) { return; }
    free(cx->scratch_data);
    cx->scratch_data = aligned_alloc(64, (need + 63) / 64 * 64);
    if (cx->scratch_data == NULL) { fatal("oneDNN: out of memory for %zu bytes of scratch", need); }
    cx->scratch_bytes = need;
    if (cx->scratch != NULL) { dnnl_memory_destroy(cx->scratch); }
    dnnl_memory_desc_t flat;
    dnnl_dims_t sd = {(dnnl_dim_t)need};
    dnnlCheck(dnnl_memory_desc_init_by_tag(&flat, 1, sd, dnnl_u8, dnnl_a), "scratch desc");
    dnnlCheck(dnnl_memory_create(&cx->scratch, &flat, dnnl_ctx.engine, cx->scratch_data), "scratch memory");
}

// a primitive attribute with the scratchpad ours (the caller destroys it)
static inline dnnl_primitive_attr_t dnnl_attr_user_scratch(void) {
    dnnl_primitive_attr_t attr;
    dnnlCheck(dnnl_primitive_attr_create(&attr), "attr");
    dnnlCheck(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user), "scratchpad mode");
    return attr;
}

// The reference product. Its scratch (fp32 copies of A and of a plain B, and a bf16 C before its rounding)
// grows at start-up only, to the largest product's need, shared by all of them.
static struct { float* data; size_t floats; } bf16_ref_scratch = {NULL, 0};

static inline size_t bf16_ref_b_floats(const DnnlGemm* g) { return (size_t)g->K * g->N; }  // one matrix of B

static inline void bf16_ref_create(DnnlGemm* g, int pack_b) {
    if ((g->c_form & DNNL_C_ADD) && (g->c_form & (DNNL_C_BF16 | DNNL_C_BIAS))) {
        fatal("bf16 reference: no product form %d (a sum onto a bf16 C or with a bias)", g->c_form);
    }
    g->ref = 1;
    size_t need = (size_t)g->M * g->K + (pack_b ? 0 : bf16_ref_b_floats(g)) +
                  ((g->c_form & DNNL_C_BF16) ? (size_t)g->M * g->N : 0);
    if (pack_b) { g->packed_bytes = bf16_ref_b_floats(g) * sizeof(float); }  // B widened, as stored, ld its width
    if (need <= bf16_ref_scratch.floats) { return; }
    free(bf16_ref_scratch.data);
    bf16_ref_scratch.data = (float*)aligned_alloc(64, (need * sizeof(float) + 63) / 64 * 64);
    if (bf16_ref_scratch.data == NULL) { fatal("bf16 reference: out of memory for %zu floats of scratch", need); }
    bf16_ref_scratch.floats = need;
}

// (rows, cols) bf16 with row stride ld into dst (rows, cols) fp32, contiguous; exact
static inline void bf16_ref_widen(float* dst, const bf16* src, int rows, int cols, int ld) {
    #pragma omp parallel for
    for (int r = 0; r < rows; r++) {
        for (int c = 0; c < cols; c++) { dst[(size_t)r * cols + c] = bf16_to_float(src[(size_t)r * ld + c]); }
    }
}

// C [+]= op(A) op(B) (+ bias) for each of the batch, as dnnl_gemm_run_bias describes; packed: B is the fp32
// buffer dnnl_gemm_pack_b wrote
static inline void bf16_ref_run(const DnnlGemm* g, const bf16* A, const void* B, int packed, const float* bias, void* C) {
    int M = g->M, N = g->N, K = g->K;
    int arows = g->transA ? K : M, acols = g->transA ? M : K, brows = g->transB ? N : K, bcols = g->transB ? K : N;
    float* af = bf16_ref_scratch.data;
    float* bf = af + (size_t)M * K;
    float* tmp = packed ? bf : bf + bf16_ref_b_floats(g);  // (M, N): a bf16 C before its rounding
    int to_tmp = (g->c_form & DNNL_C_BF16) != 0;
    for (int i = 0; i < g->batch; i++) {
        bf16_ref_widen(af, A + (size_t)i * arows * g->lda, arows, acols, g->lda);
        const float* bi = (const float*)B + (size_t)i * bf16_ref_b_floats(g);
        if (!packed) {
            bf16_ref_widen(bf, (const bf16*)B + (size_t)i * brows * g->ldb, brows, bcols, g->ldb);
            bi = bf;
        }
        float* c32 = to_tmp ? tmp : (float*)C + (size_t)i * M * g->ldc;
        int ldc32 = to_tmp ? N : g->ldc;
        if (bias != NULL) {
            for (int m = 0; m < M; m++) { memcpy(c32 + (size_t)m * ldc32, bias, (size_t)N * sizeof(float)); }
        }
        float beta = (bias != NULL || (g->c_form & DNNL_C_ADD)) ? 1.0f : 0.0f;
        cblas_sgemm(CblasRowMajor, g->transA ? CblasTrans : CblasNoTrans, g->transB ? CblasTrans : CblasNoTrans,
                    M, N, K, 1.0f, af, acols, bi, bcols, beta, c32, ldc32);
        if (to_tmp) {
            bf16* c16 = (bf16*)C + (size_t)i * M * g->ldc;
            for (int m = 0; m < M; m++) {
                for (int n = 0; n < N; n++) { c16[(size_t)m * g->ldc + n] = bf16_from_float(tmp[(size_t)m * N + n]); }
            }
        }
    }
}

// batch > 1: that many products of the same shape in one call, each operand's matrices one after the other
// (A's batch stride (transA ? K : M) * lda, B's (transB ? N : K) * ldb, C's M * ldc): the attention's heads.
static inline void dnnl_gemm_create_strided(DnnlGemm* g, int batch, int transA, int transB, int M, int N, int K,
                                            int lda, int ldb, int ldc, int c_form, int pack_b) {
    memset(g, 0, sizeof(*g));
    g->batch = batch; g->transA = transA; g->transB = transB; g->M = M; g->N = N; g->K = K;
    g->lda = lda; g->ldb = ldb; g->ldc = ldc; g->c_form = c_form;
    if (bf16_test_reference()) { bf16_ref_create(g, pack_b); return; }
    dnnl_context_init();
    int nd = batch > 1 ? 3 : 2, o = nd - 2;  // o: the matrix dims' offset after the batch dim
    dnnl_dims_t adims = {batch}, bdims = {batch}, cdims = {batch}, astr = {0}, bstr = {0}, cstr = {0};
    astr[0] = (dnnl_dim_t)(transA ? K : M) * lda;
    bstr[0] = (dnnl_dim_t)(transB ? N : K) * ldb;
    cstr[0] = (dnnl_dim_t)M * ldc;
    adims[o] = M; adims[o + 1] = K; astr[o] = transA ? 1 : lda; astr[o + 1] = transA ? lda : 1;
    bdims[o] = K; bdims[o + 1] = N; bstr[o] = transB ? 1 : ldb; bstr[o + 1] = transB ? ldb : 1;
    cdims[o] = M; cdims[o + 1] = N; cstr[o] = ldc; cstr[o + 1] = 1;
    dnnl_memory_desc_t amd, bmd, cmd;
    dnnlCheck(dnnl_memory_desc_init_by_strides(&amd, nd, adims, dnnl_bf16, astr), "memory desc A");
    dnnlCheck(dnnl_memory_desc_init_by_strides(&bmd, nd, bdims, dnnl_bf16, bstr), "memory desc B");
    dnnlCheck(dnnl_memory_desc_init_by_strides(&cmd, nd, cdims, (c_form & DNNL_C_BF16) ? dnnl_bf16 : dnnl_f32, cstr),
              "memory desc C");
    dnnl_memory_desc_t bany;  // pack_b: the primitive picks B's layout
    dnnlCheck(dnnl_memory_desc_init_by_tag(&bany, nd, bdims, dnnl_bf16, dnnl_format_tag_any), "memory desc B any");
    dnnl_memory_desc_t biasmd;  // DNNL_C_BIAS: (1, N), broadcast over the rows (and the batch)
    dnnl_dims_t biasdims = {1, 1, 1};
    biasdims[nd - 1] = N;
    dnnlCheck(dnnl_memory_desc_init_by_tag(&biasmd, nd, biasdims, dnnl_f32, nd == 3 ? dnnl_abc : dnnl_ab), "memory desc bias");
    dnnl_matmul_desc_t desc;
    dnnlCheck(dnnl_matmul_desc_init(&desc, &amd, pack_b ? &bany : &bmd, (c_form & DNNL_C_BIAS) ? &biasmd : NULL, &cmd),
              "matmul desc");
    dnnl_primitive_attr_t attr = dnnl_attr_user_scratch();
    dnnl_post_ops_t po = NULL;
    if (c_form & DNNL_C_ADD) {
        dnnlCheck(dnnl_post_ops_create(&po), "post ops");
        dnnlCheck(dnnl_post_ops_append_sum(po, 1.0f), "sum post op");
        dnnlCheck(dnnl_primitive_attr_set_post_ops(attr, po), "set post ops");
    }
    dnnl_primitive_desc_t pd;
    dnnl_status_t s = dnnl_primitive_desc_create(&pd, &desc, attr, dnnl_ctx.engine, NULL);
    if (s != dnnl_success) { fatal("oneDNN: no bf16 matmul for %d x %d x %d on this CPU (status %d)", M, K, N, (int)s); }
    dnnl_scratch_reserve(pd);
    dnnlCheck(dnnl_primitive_create(&g->prim, pd), "matmul primitive");
    dnnlCheck(dnnl_memory_create(&g->a, &amd, dnnl_ctx.engine, DNNL_MEMORY_NONE), "memory A");
    dnnlCheck(dnnl_memory_create(&g->c, &cmd, dnnl_ctx.engine, DNNL_MEMORY_NONE), "memory C");
    if (c_form & DNNL_C_BIAS) { dnnlCheck(dnnl_memory_create(&g->bias, &biasmd, dnnl_ctx.engine, DNNL_MEMORY_NONE), "memory bias"); }
    if (pack_b) {
        const dnnl_memory_desc_t* packed = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
        g->packed_bytes = dnnl_memory_desc_get_size(packed);
        dnnlCheck(dnnl_memory_create(&g->b, packed, dnnl_ctx.engine, DNNL_MEMORY_NONE), "memory B packed");
        dnnlCheck(dnnl_memory_create(&g->b_plain, &bmd, dnnl_ctx.engine, DNNL_MEMORY_NONE), "memory B");
        dnnl_primitive_attr_t rattr = dnnl_attr_user_scratch();
        dnnl_primitive_desc_t rpd;
        dnnlCheck(dnnl_reorder_primitive_desc_create(&rpd, &bmd, dnnl_ctx.engine, packed, dnnl_ctx.engine, rattr),
                  "reorder desc");
        dnnl_scratch_reserve(rpd);
        dnnlCheck(dnnl_primitive_create(&g->pack, rpd), "reorder primitive");
        dnnl_primitive_desc_destroy(rpd);
        dnnl_primitive_attr_destroy(rattr);
    } else {
        dnnlCheck(dnnl_memory_create(&g->b, &bmd, dnnl_ctx.engine, DNNL_MEMORY_NONE), "memory B");
    }
    dnnl_primitive_desc_destroy(pd);
    if (po != NULL) { dnnl_post_ops_destroy(po); }
    dnnl_primitive_attr_destroy(attr);
}

static inline void dnnl_gemm_create(DnnlGemm* g, int transA, int transB, int M, int N, int K, int lda, int ldb,
                                    int ldc, int c_form, int pack_b) {
    dnnl_gemm_create_strided(g, 1, transA, transB, M, N, K, lda, ldb, ldc, c_form, pack_b);
}

// batch products of dense (M,K) x (K,N) matrices (or their transposes, read through the strides) in one call
static inline void dnnl_gemm_create_batch(DnnlGemm* g, int batch, int transA, int transB, int M, int N, int K) {
    dnnl_gemm_create_strided(g, batch, transA, transB, M, N, K, transA ? M : K, transB ? K : N, N, 0, 0);
}

// pack_b: the bytes of B in the primitive's layout (a buffer for dnnl_gemm_pack_b; 64-byte aligned)
static inline size_t dnnl_gemm_packed_bytes(const DnnlGemm* g) { return g->packed_bytes; }

// x and y read B in the same layout (one packed B serves both)
static inline int dnnl_gemm_same_b(const DnnlGemm* x, const DnnlGemm* y) {
    if (x->ref || y->ref) { return x->ref && y->ref && x->transB == y->transB && x->K == y->K && x->N == y->N; }
    const dnnl_memory_desc_t *mx, *my;
    dnnlCheck(dnnl_memory_get_memory_desc(x->b, &mx), "query B");
    dnnlCheck(dnnl_memory_get_memory_desc(y->b, &my), "query B");
    return dnnl_memory_desc_equal(mx, my);
}

// executes p on dnnl_ctx with its n arguments plus the scratchpad (where there is one; args has room
// for it), and waits for it
static inline void dnnl_execute(dnnl_primitive_t p, dnnl_exec_arg_t* args, int n, const char* what) {
    DnnlContext* cx = &dnnl_ctx;
    if (cx->scratch != NULL) { args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, cx->scratch}; }
    dnnlCheck(dnnl_primitive_execute(p, cx->stream, n, args), what);
    dnnlCheck(dnnl_stream_wait(cx->stream), "stream wait");
}

// pack_b: B (laid out as dnnl_gemm_create described it) into packed, in the primitive's layout
static inline void dnnl_gemm_pack_b(DnnlGemm* g, const bf16* B, void* packed) {
    if (g->ref) {
        if (g->packed_bytes == 0) { fatal("bf16 reference: dnnl_gemm_pack_b on a product made without pack_b"); }
        bf16_ref_widen((float*)packed, B, g->transB ? g->N : g->K, g->transB ? g->K : g->N, g->ldb);
        return;
    }
    if (g->pack == NULL) { fatal("oneDNN: dnnl_gemm_pack_b on a product made without pack_b"); }
    dnnlCheck(dnnl_memory_set_data_handle(g->b_plain, (void*)B), "bind B");
    dnnlCheck(dnnl_memory_set_data_handle(g->b, packed), "bind packed B");
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_FROM, g->b_plain}, {DNNL_ARG_TO, g->b}};
    dnnl_execute(g->pack, args, 2, "reorder");
}

// runs the product on the given data, outside any parallel region (oneDNN opens its own); B is bf16 as
// described at creation, or with pack_b a buffer that dnnl_gemm_pack_b filled; C fp32, or bf16 (DNNL_C_BF16);
// bias (N) fp32 for a DNNL_C_BIAS product, NULL for any other
static inline void dnnl_gemm_run_bias(DnnlGemm* g, const bf16* A, const void* B, const float* bias, void* C) {
    int made_with_bias = (g->c_form & DNNL_C_BIAS) != 0;
    if ((bias != NULL) != made_with_bias) {
        fatal("oneDNN: a product made %s a bias run %s one", made_with_bias ? "with" : "without",
              bias != NULL ? "with" : "without");
    }
    if (g->ref) { bf16_ref_run(g, A, B, g->packed_bytes > 0, bias, C); return; }
    dnnlCheck(dnnl_memory_set_data_handle(g->a, (void*)A), "bind A");
    dnnlCheck(dnnl_memory_set_data_handle(g->b, (void*)B), "bind B");
    dnnlCheck(dnnl_memory_set_data_handle(g->c, C), "bind C");
    dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, g->a}, {DNNL_ARG_WEIGHTS, g->b}, {DNNL_ARG_DST, g->c}};
    int n = 3;
    if (bias != NULL) {
        dnnlCheck(dnnl_memory_set_data_handle(g->bias, (void*)bias), "bind bias");
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, g->bias};
    }
    dnnl_execute(g->prim, args, n, "matmul");
}

static inline void dnnl_gemm_run(DnnlGemm* g, const bf16* A, const void* B, void* C) { dnnl_gemm_run_bias(g, A, B, NULL, C); }

static inline void dnnl_gemm_destroy(DnnlGemm* g) {
    if (g->prim == NULL) { memset(g, 0, sizeof(*g)); return; }
    dnnl_primitive_destroy(g->prim);
    dnnl_memory_destroy(g->a);
    dnnl_memory_destroy(g->b);
    dnnl_memory_destroy(g->c);
    if (g->bias != NULL) { dnnl_memory_destroy(g->bias); }
    if (g->pack != NULL) {
        dnnl_primitive_destroy(g->pack);
        dnnl_memory_destroy(g->b_plain);
    }
    memset(g, 0, sizeof(*g));
}

// 1: oneDNN's bf16 products run on AMX tiles
static inline int dnnl_isa_amx(void) {
    return !bf16_test_reference() && dnnl_get_effective_cpu_isa() == dnnl_cpu_isa_avx512_core_amx;
}

// the ISA oneDNN dispatches to, for the start-up table
static inline const char* dnnl_isa_name(void) {
    if (bf16_test_reference()) { return "the test reference (LLMC_BF16_TEST_REFERENCE: SGEMM on widened bf16)"; }
    switch (dnnl_get_effective_cpu_isa()) {
        case dnnl_cpu_isa_avx512_core_amx: return "AMX";
        case dnnl_cpu_isa_avx512_core_bf16: return "avx512_bf16";
        case dnnl_cpu_isa_avx512_core: return "avx512 (bf16 emulated)";
        default: return "no bf16 ISA";
    }
}
#else
// built without oneDNN (no libdnnl-dev): the types exist, nothing can be created
static inline int dnnl_available(void) { return 0; }
enum { DNNL_C_SET = 0, DNNL_C_ADD = 1, DNNL_C_BF16 = 2, DNNL_C_BIAS = 4 };
typedef struct { int unused; } DnnlGemm;
static inline void dnnl_gemm_create(DnnlGemm* g, int transA, int transB, int M, int N, int K, int lda, int ldb,
                                    int ldc, int c_form, int pack_b) {
    (void)g; (void)transA; (void)transB; (void)M; (void)N; (void)K; (void)lda; (void)ldb; (void)ldc; (void)c_form;
    (void)pack_b;
    fatal("bf16: this build has no oneDNN (install libdnnl-dev and rebuild)");
}
static inline void dnnl_gemm_create_batch(DnnlGemm* g, int batch, int transA, int transB, int M, int N, int K) {
    (void)batch;
    dnnl_gemm_create(g, transA, transB, M, N, K, 0, 0, 0, 0, 0);
}
static inline size_t dnnl_gemm_packed_bytes(const DnnlGemm* g) { (void)g; return 0; }
static inline int dnnl_gemm_same_b(const DnnlGemm* x, const DnnlGemm* y) { (void)x; (void)y; return 1; }
static inline void dnnl_gemm_pack_b(DnnlGemm* g, const bf16* B, void* packed) { (void)g; (void)B; (void)packed; }
static inline void dnnl_gemm_run(DnnlGemm* g, const bf16* A, const void* B, void* C) { (void)g; (void)A; (void)B; (void)C; }
static inline void dnnl_gemm_run_bias(DnnlGemm* g, const bf16* A, const void* B, const float* bias, void* C) {
    (void)g; (void)A; (void)B; (void)bias; (void)C;
}
static inline void dnnl_gemm_destroy(DnnlGemm* g) { (void)g; }
static inline int dnnl_isa_amx(void) { return 0; }
static inline const char* dnnl_isa_name(void) { return "no oneDNN"; }
#endif // LLMC_DNNL

// ----------------------------------------------------------------------------
// the bf16 primitives' bookkeeping for the trainer's layers (train_gpt2.c's matmul_*_bf16 and attention_*_bf16
// run them): each made once at start-up for the allocated (B, T), with or without oneDNN (the stubs above
// refuse at creation)

// A linear layer's primitives for its one shape at the allocated (B, T): out (N,OC) = inp (N,C) @ W^T,
// dinp (N,C) = dout (N,OC) @ W, dW (OC,C) += dout^T @ inp, with bf16 operands read through strides (no
// explicit transposes). The right operand can be packed into the layout its primitive reads fastest (the
// same results bit for bit, llmc/cpu_dnnl.h): the dweight GEMM's inp always, at each call; the weights with
// pack_w, once per update (bf16_linear_pack). The left operands stay as they are (dout^T too: packing it
// would change the order of the sums).
// A wide layer (OC > chunk: the lm head, Vp x C) runs its products in pieces that oneDNN runs at up to twice
// the speed of one product over the whole W (measured on an AMX Xeon: docs/benchmark.md): the forward in
// blocks of BF16_ROWS rows of inp (each block's out rows whole and contiguous), dinp and dW in chunks of
// `chunk` rows of W (columns of dout). Each block of out and chunk of dW is its own product; dinp sums the
// chunks' products in chunk order (fp32, the sum post-op). A layer no wider than a chunk is one product.
#define BF16_CHUNK 4096  // a wide layer's rows of W per dinp and dweight product
#define BF16_ROWS 256    // a wide layer's rows of inp per forward product (where they divide N)
typedef struct {
    DnnlGemm fwd;                // a block of fwd_rows rows of out, in the form fwd_form
    int fwd_form;                // DNNL_C_BIAS: out = product + bias (a layer without a residual), with
                                 // DNNL_C_BF16 rounded to bf16 (qkv: the attention reads it so); DNNL_C_ADD: out +=
                                 // product, onto the bias and residual written first; DNNL_C_SET: out = product
                                 // (no bias: the lm head)
    DnnlGemm fwd16;              // a layer without bias (the lm head): fwd with out rounded to bf16 (the logits)
    int fwd16_plain;             // fwd16 reads w16 as it is (pack_w, but its packed layout is not fwd's)
    DnnlGemm dinp[3];            // [0] the first chunk (dinp =), [1] a later full chunk (+=), [2] the narrower last (+=)
    DnnlGemm dweight[2];         // [0] a chunk of rows of dW, [1] the last, narrower chunk (rem > 0)
    int OC, C, fwd_rows;         // the allocated rows N are a multiple of fwd_rows
    int chunk, nfull, rem, nchunks; // OC = nfull * chunk + rem
    const bf16* w16;             // (layers, OC, C) the bf16 weights (in params_bf16)
    int layers;
    int pack_w;                  // 1: fwd and dinp read w_fwd and w_dinp; 0: w16
    size_t fwd_bytes, dinp_bytes; // pack_w: one layer's packed weight in each layout, all chunks (64-byte multiples)
    size_t* dinp_off;            // pack_w: (nchunks) each chunk's offset in a layer's packed weight for dinp
    size_t act_bytes[2];         // dweight[k]'s packed inp (64-byte multiples)
    void* w_fwd;                 // pack_w: (layers, W^T packed for fwd)
    void* w_dinp;                // pack_w: (layers, W packed for dinp, chunk by chunk)
} Bf16Linear;

static inline size_t round64(size_t n) { return (n + 63) / 64 * 64; }

static inline int bf16_chunk_kind(const Bf16Linear* l, int c) { return c < l->nfull ? 0 : 1; }
static inline DnnlGemm* bf16_chunk_dinp(Bf16Linear* l, int c) { return &l->dinp[c == 0 ? 0 : c < l->nfull ? 1 : 2]; }

static inline void bf16_linear_create(Bf16Linear* l, int N, int C, int OC, int fwd_form, const bf16* w16, int layers,
                               int pack_w, int chunk) {
    memset(l, 0, sizeof(*l));
    l->fwd_form = fwd_form;
    l->pack_w = pack_w;
    l->w16 = w16;
    l->layers = layers;
    l->OC = OC;
    l->C = C;
    l->chunk = chunk < OC ? chunk : OC;
    l->nfull = OC / l->chunk;
    l->rem = OC - l->nfull * l->chunk;
    l->nchunks = l->nfull + (l->rem > 0);
    l->fwd_rows = l->nchunks > 1 && N % BF16_ROWS == 0 ? BF16_ROWS : N;
    dnnl_gemm_create(&l->fwd, 0, 1, l->fwd_rows, OC, C, C, C, OC, fwd_form, pack_w);  // B = W^T, read transposed
    if (fwd_form == DNNL_C_SET) {  // the lm head: its logits for a loss in bf16
        dnnl_gemm_create(&l->fwd16, 0, 1, l->fwd_rows, OC, C, C, C, OC, DNNL_C_BF16, pack_w);
        if (pack_w && !dnnl_gemm_same_b(&l->fwd, &l->fwd16)) {
            dnnl_gemm_destroy(&l->fwd16);
            dnnl_gemm_create(&l->fwd16, 0, 1, l->fwd_rows, OC, C, C, C, OC, DNNL_C_BF16, 0);
            l->fwd16_plain = 1;
        }
    }
    int width[2] = {l->chunk, l->rem};
    for (int k = 0; k < 2; k++) {
        if (width[k] == 0) { continue; }
        dnnl_gemm_create(&l->dweight[k], 1, 0, width[k], C, N, OC, C, C, 1, 1);  // B = inp, A = dout^T
        l->act_bytes[k] = round64(dnnl_gemm_packed_bytes(&l->dweight[k]));
    }
    dnnl_gemm_create(&l->dinp[0], 0, 0, N, C, l->chunk, OC, C, C, 0, pack_w);  // B = W
    if (l->nfull > 1) { dnnl_gemm_create(&l->dinp[1], 0, 0, N, C, l->chunk, OC, C, C, 1, pack_w); }
    if (l->rem > 0) { dnnl_gemm_create(&l->dinp[2], 0, 0, N, C, l->rem, OC, C, C, 1, pack_w); }
    if (!pack_w) { return; }
    l->fwd_bytes = round64(dnnl_gemm_packed_bytes(&l->fwd));
    l->dinp_off = (size_t*)mallocCheck((size_t)l->nchunks * sizeof(size_t));
    for (int c = 0; c < l->nchunks; c++) {
        l->dinp_off[c] = l->dinp_bytes;
        l->dinp_bytes += round64(dnnl_gemm_packed_bytes(bf16_chunk_dinp(l, c)));
    }
    l->w_fwd = aligned_alloc(64, layers * l->fwd_bytes);
    l->w_dinp = aligned_alloc(64, layers * l->dinp_bytes);
    if (l->w_fwd == NULL || l->w_dinp == NULL) { fatal("bf16: out of memory for the packed weights"); }
}

static inline void bf16_linear_destroy(Bf16Linear* l) {
    dnnl_gemm_destroy(&l->fwd);
    dnnl_gemm_destroy(&l->fwd16);
    for (int k = 0; k < 2; k++) { dnnl_gemm_destroy(&l->dweight[k]); }
    for (int k = 0; k < 3; k++) { dnnl_gemm_destroy(&l->dinp[k]); }
    free(l->dinp_off);
    free(l->w_fwd);
    free(l->w_dinp);
    memset(l, 0, sizeof(*l));
}

// layer's weights (rows c*chunk on) as the dinp product of chunk c reads them
static inline const void* bf16_linear_w_dinp(const Bf16Linear* l, int layer, int c) {
    if (!l->pack_w) { return l->w16 + ((size_t)layer * l->OC + (size_t)c * l->chunk) * l->C; }
    return (const char*)l->w_dinp + layer * l->dinp_bytes + l->dinp_off[c];
}

// layer's weights as the forward reads them
static inline const void* bf16_linear_w_fwd(const Bf16Linear* l, int layer) {
    if (!l->pack_w) { return l->w16 + (size_t)layer * l->OC * l->C; }
    return (const char*)l->w_fwd + layer * l->fwd_bytes;
}

// layer's weights as the forward with bf16 out (fwd16) reads them
static inline const void* bf16_linear_w_fwd16(const Bf16Linear* l, int layer) {
    return l->fwd16_plain ? l->w16 + (size_t)layer * l->OC * l->C : bf16_linear_w_fwd(l, layer);
}

// pack_w: every layer's bf16 weights packed for the forward and the dinp product (after each update)
static inline void bf16_linear_pack(Bf16Linear* l) {
    for (int i = 0; l->pack_w && i < l->layers; i++) {
        const bf16* w = l->w16 + (size_t)i * l->OC * l->C;
        dnnl_gemm_pack_b(&l->fwd, w, (void*)bf16_linear_w_fwd(l, i));
        for (int c = 0; c < l->nchunks; c++) {
            dnnl_gemm_pack_b(bf16_chunk_dinp(l, c), w + (size_t)c * l->chunk * l->C, (void*)bf16_linear_w_dinp(l, i, c));
        }
    }
}

// the bytes of packed inp the dweight products need (the scratch matmul_backward_bf16 takes)
static inline size_t bf16_linear_act_bytes(const Bf16Linear* l) { return l->act_bytes[0] + l->act_bytes[1]; }

// The attention with its six products in bf16: q, k, v, the probabilities, dout and d(scores) are rounded
// to bf16 as the GPU's attention has them, the products accumulate in fp32, and the softmax and its backward
// run in fp32 on fp32 scores. What the backward needs from the forward is kept in bf16, as the GPU trainer
// keeps it: q, k, v head by head and the probabilities (half the bytes of fp32 to write and read back).
// Each product runs over all heads of a group of sequences in one call, on operands laid out head by head
// (q, k, v, dout: (B, NH, T, hs) per part, rounded into that layout; results to (G, NH, T, hs) scratch, then
// put back in place): oneDNN's AMX kernels take dense batches, where a product per head and block of rows
// (as the fp32 attention runs) cost several times its FLOPs in per-call work, and each call and each pass
// over the group is a parallel region whose start wakes the sleeping threads (docs/benchmark.md). The
// products span the whole (T, T) square; the masked corner's probabilities and d(scores) are zeros, so they
// add nothing.
enum { ATT_SCORES, ATT_AV, ATT_DV, ATT_DATT, ATT_DQ, ATT_DK, ATT_PRODUCTS };
#define ATT_GROUP_ELEMS (1 << 20)  // a group's (G, NH, T, T) squares: at most this many, or one sequence's
typedef struct {
    DnnlGemm prim[ATT_PRODUCTS]; // over G*NH heads: q k^T, att v, att^T dout, dout v^T, ds k, ds^T q
    int group;       // G: the sequences each product covers, a divisor of B
    float* s32;      // (G, NH, T, T) the scores (forward), d(att) (backward)
    bf16* ds16;      // (G, NH, T, T) d(scores) in bf16 (backward)
    float* h32;      // (3, G, NH, T, hs) a product's results head by head: out, or dq, dk, dv
} Bf16Attention;

// the largest divisor of B whose squares fit ATT_GROUP_ELEMS (at least 1)
static inline int bf16_attention_group(int B, int T, int NH) {
    size_t one = (size_t)NH * T * T;
    int g = 1;
    for (int d = 1; d <= B; d++) {
        if (B % d == 0 && (size_t)d * one <= ATT_GROUP_ELEMS) { g = d; }
    }
    return g;
}

// primitives and scratch for groups of G sequences of (T, C) with NH heads
static inline void bf16_attention_create(Bf16Attention* ba, int G, int T, int C, int NH) {
    int hs = C / NH;
    memset(ba, 0, sizeof(*ba));
    ba->group = G;
    size_t sq = (size_t)G * NH * T * T;
    ba->s32 = (float*)mallocCheck(sq * sizeof(float));
    ba->ds16 = (bf16*)mallocCheck(sq * sizeof(bf16));
    ba->h32 = (float*)mallocCheck((size_t)3 * G * T * C * sizeof(float));
    int n = G * NH;
    dnnl_gemm_create_batch(&ba->prim[ATT_SCORES], n, 0, 1, T, T, hs);  // q (T,hs) k^T
    dnnl_gemm_create_batch(&ba->prim[ATT_AV], n, 0, 0, T, hs, T);      // att (T,T) v (T,hs)
    dnnl_gemm_create_batch(&ba->prim[ATT_DV], n, 1, 0, T, hs, T);      // att^T dout
    dnnl_gemm_create_batch(&ba->prim[ATT_DATT], n, 0, 1, T, T, hs);    // dout v^T
    dnnl_gemm_create_batch(&ba->prim[ATT_DQ], n, 0, 0, T, hs, T);      // ds k
    dnnl_gemm_create_batch(&ba->prim[ATT_DK], n, 1, 0, T, hs, T);      // ds^T q
}

static inline void bf16_attention_destroy(Bf16Attention* ba) {
    for (int k = 0; k < ATT_PRODUCTS; k++) { dnnl_gemm_destroy(&ba->prim[k]); }
    free(ba->s32);
    free(ba->ds16);
    free(ba->h32);
    memset(ba, 0, sizeof(*ba));
}

// the attention's operands and results between the trainer's layout, (B, T, parts*C) row by row, and the
// products' layout, head by head

// x (B, T, parts*C) rounded into dst (parts, B, NH, T, hs): each part of all sequences head by head; or (x
// NULL) x16, in bf16 already, copied so
static inline void bf16_to_heads(bf16* dst, const float* x, const bf16* x16, int B, int T, int C, int NH, int parts) {
    int hs = C / NH, w = parts * C;
    size_t psz = (size_t)B * T * C;
    #pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            size_t row = ((size_t)b * T + t) * w;
            for (int j = 0; j < parts * NH; j++) {  // j = part * NH + h
                bf16* d = dst + (size_t)(j / NH) * psz + (((size_t)b * NH + j % NH) * T + t) * hs;
                if (x16 != NULL) {
                    memcpy(d, x16 + row + j * hs, hs * sizeof(bf16));
                } else {
                    #pragma omp simd
                    for (int i = 0; i < hs; i++) { d[i] = bf16_from_float(x[row + j * hs + i]); }
                }
            }
        }
    }
}

// h (parts, G, NH, T, hs) put back into sequences b0 .. b0+G-1 of y (B, T, ldy) at columns 0..parts*C, or
// (y NULL) of y16, rounded to bf16
static inline void bf16_from_heads(float* y, bf16* y16, const float* h, int b0, int G, int T, int C, int NH, int parts,
                            int ldy) {
    int hs = C / NH;
    size_t psz = (size_t)G * T * C;
    #pragma omp parallel for schedule(static)
    for (int gt = 0; gt < G * T; gt++) {
        int g = gt / T, t = gt % T;
        size_t row = ((size_t)(b0 + g) * T + t) * ldy;
        for (int j = 0; j < parts * NH; j++) {
            const float* s = h + (size_t)(j / NH) * psz + (((size_t)g * NH + j % NH) * T + t) * hs;
            if (y16 != NULL) {
                #pragma omp simd
                for (int i = 0; i < hs; i++) { y16[row + j * hs + i] = bf16_from_float(s[i]); }
            } else {
                #pragma omp simd
                for (int i = 0; i < hs; i++) { y[row + j * hs + i] = s[i]; }
            }
        }
    }
}

// h (3, G, NH, T, hs): dq, dk, dv of sequences b0 .. b0+G-1 head by head, into those sequences' rows of dqkv16
// (B, T, 3C) rounded to bf16, with dbias (3C) += their column sums in fp32: what the qkv layer's bf16 backward
// does with an fp32 dqkv first, without it. Threads own column ranges and sum rows in order; groups called in
// order, the sums are colsum_part's over all B*T rows, bit for bit.
static inline void bf16_from_heads_dout(bf16* dqkv16, float* dbias, const float* h, int b0, int G, int T, int C, int NH) {
    int hs = C / NH, W = 3 * C;
    size_t psz = (size_t)G * T * C;
    #pragma omp parallel
    {
        int tid = omp_get_thread_num(), nth = omp_get_num_threads();
        int c0 = W * tid / nth, c1 = W * (tid + 1) / nth;
        for (int gt = 0; gt < G * T; gt++) {
            int g = gt / T, t = gt % T;
            bf16* y = dqkv16 + ((size_t)(b0 + g) * T + t) * W;
            for (int c = c0; c < c1;) {  // the part of head j (of 3 NH) in c .. c1
                int j = c / hs, i0 = c % hs, i1 = c1 - (c - i0) < hs ? c1 - (c - i0) : hs;
                const float* src = h + (size_t)(j / NH) * psz + (((size_t)g * NH + j % NH) * T + t) * hs;
                #pragma omp simd
                for (int i = i0; i < i1; i++) {
                    y[j * hs + i] = bf16_from_float(src[i]);
                    dbias[j * hs + i] += src[i];
                }
                c += i1 - i0;
            }
        }
    }
}

#endif // LLMC_CPU_DNNL_H

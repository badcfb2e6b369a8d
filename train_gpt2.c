/*
 * train_gpt2.c — GPT-2 training on the CPU in fp32 (or with bf16 matmuls), forward and backward written by
 * hand (llm.c's model: learned position embeddings, pre-LayerNorm blocks, tanh-GELU MLP, causal
 * self-attention, lm_head tied to wte, vocab padded to a multiple of 128).
 * Speed: every matrix multiply is a cblas_sgemm (OpenBLAS); everything else is OpenMP-parallel with static
 * schedules and loops written to vectorise. --precision bf16: every matmul (the linear layers', the lm
 * head's, the attention's) takes bf16 operands and accumulates in fp32 through oneDNN (llmc/cpu_dnnl.h); the
 * products' inputs and the logits are kept in bf16, as the GPU trainer keeps them; weights, gradients, AdamW
 * state and every other op stay fp32 (docs/correctness.md, "bf16 on the CPU").
 * Deterministic: with the same thread count, the same run gives the same bits (no atomics, no reductions
 * whose order depends on timing).
 * Memory: one parameter buffer, one gradient buffer, AdamW's m and v, and one activation arena, all
 * allocated at start-up; the training loop allocates nothing.
 * Tests `#define TESTING` and `#include "../train_gpt2.c"` to reach the model API without main().
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cblas.h>
#include <omp.h>

#include "llmc/cpu_blas.h"     // the OpenBLAS kernel and the OpenMP wait policy (cpu_blas_init)
#include "llmc/cpu_dnnl.h"     // bf16 matmuls through oneDNN (--precision bf16)
#include "llmc/cpu_profile.h"  // where a step's time goes (the bench build only)
#include "llmc/adamw.h"        // one AdamW element (adamw_element)
#include "llmc/average.h"      // the weights to evaluate and keep: an EMA of the weights (--ema)
#include "llmc/rand.h"         // the random init's stream
#include "llmc/config.h"       // the flags
#include "llmc/run.h"          // data, schedule, sampler, logs, counters
#include "llmc/run_state.h"    // checkpoints and resume
#include "llmc/report.h"       // the start-up table and the summary
#include "llmc/signals.h"      // Ctrl-C: stop after this step, with a checkpoint
#include "llmc/kvcache.h"      // generation one position at a time (the samples)
#include "hybrid/run.h"        // hybrid mode: its flags, its plan before a step and its report after it

// ----------------------------------------------------------------------------
// exp and tanh that vectorise. libm's expf/tanhf are scalar calls, and the loss and the GELU would
// otherwise take a fifth of a step. expf_vec: range reduction x = n ln2 + r, |r| <= ln2/2, then a
// degree-7 polynomial (Cephes' expf coefficients); max error about 2 ulp. Inputs below -87.3 give 0,
// NaN gives NaN (the fault detector relies on it).

static inline float expf_vec(float x) {
    float xc = x < -87.3f ? -87.3f : (x > 88.3f ? 88.3f : x);
    xc = xc == xc ? xc : 0.0f;  // NaN: keep the int conversion below defined; the result is NaN again
    // round(x / ln2) with the 1.5 * 2^23 trick: exact, branch-free, vectorisable
    float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof(scale));
    return x < -87.3f ? 0.0f : (x == x ? p * scale : x);
}

// tanh(u) = 1 - 2 / (exp(2u) + 1): exact limits +-1, absolute error ~1e-7 near 0
static inline float tanhf_vec(float u) {
    return 1.0f - 2.0f / (expf_vec(2.0f * u) + 1.0f);
}

// ----------------------------------------------------------------------------
// the layers, forward and backward. Shapes: B batch, T time, C channels, OC output channels,
// NH heads, Vp padded vocab. Backward functions accumulate (+=) into parameter gradients.
// Each matmul and the attention come in fp32 and, right after, in bf16 (--precision bf16): bf16 operands
// and fp32 accumulation through oneDNN, each product made once at start-up for the allocated (B, T)
// (llmc/cpu_dnnl.h: DnnlGemm, and the layers' Bf16Linear and Bf16Attention); the elementwise work around
// them (bias, residual, softmax) is the fp32 kernels', in the same order.

#define GELU_SCALE 0.7978845608028654f  // sqrt(2/pi)

// out: (B,T,C) = wte[inp] + wpe[t]; inp: (B,T)
void encoder_forward(float* out, const int* inp, const float* wte, const float* wpe, int B, int T, int C) {
    #pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            float* o = out + ((size_t)b * T + t) * C;
            const float* we = wte + (size_t)inp[b * T + t] * C;
            const float* pe = wpe + (size_t)t * C;
            #pragma omp simd
            for (int c = 0; c < C; c++) { o[c] = we[c] + pe[c]; }
        }
    }
}

// dwte: (Vp,C), dwpe: (maxT,C), dout: (B,T,C). Threads own channel ranges, so rows of repeated
// tokens are summed in a fixed order without atomics.
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* inp, int B, int T, int C) {
    #pragma omp parallel
    {
        int nth = omp_get_num_threads(), tid = omp_get_thread_num();
        int c0 = C * tid / nth, c1 = C * (tid + 1) / nth;
        for (int b = 0; b < B; b++) {
            for (int t = 0; t < T; t++) {
                const float* d = dout + ((size_t)b * T + t) * C;
                float* we = dwte + (size_t)inp[b * T + t] * C;
                float* pe = dwpe + (size_t)t * C;
                #pragma omp simd
                for (int c = c0; c < c1; c++) { we[c] += d[c]; pe[c] += d[c]; }
            }
        }
    }
}

// out: (N,C) = (inp - mean) * rstd * weight + bias per row; mean, rstd: (N) saved for backward.
// out16 not NULL: out goes there instead, rounded to bf16 (the next matmul's operand under --precision bf16)
void layernorm_forward(float* out, bf16* out16, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C) {
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float* x = inp + (size_t)n * C;
        float sum = 0.0f;
        #pragma omp simd reduction(+:sum)
        for (int c = 0; c < C; c++) { sum += x[c]; }
        float m = sum / C;
        float var = 0.0f;
        #pragma omp simd reduction(+:var)
        for (int c = 0; c < C; c++) { float d = x[c] - m; var += d * d; }
        float s = 1.0f / sqrtf(var / C + 1e-5f);
        if (out16 != NULL) {
            bf16* o = out16 + (size_t)n * C;
            #pragma omp simd
            for (int c = 0; c < C; c++) { o[c] = bf16_from_float((x[c] - m) * s * weight[c] + bias[c]); }
        } else {
            float* o = out + (size_t)n * C;
            #pragma omp simd
            for (int c = 0; c < C; c++) { o[c] = (x[c] - m) * s * weight[c] + bias[c]; }
        }
        mean[n] = m;
        rstd[n] = s;
    }
}

// dinp: (N,C) +=, dweight/dbias: (C) +=; dout, inp: (N,C)
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C) {
    #pragma omp parallel
    {
        // input gradient: rows are independent
        #pragma omp for schedule(static)
        for (int n = 0; n < N; n++) {
            const float* d = dout + (size_t)n * C;
            const float* x = inp + (size_t)n * C;
            float m = mean[n], s = rstd[n];
            float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
            #pragma omp simd reduction(+:dnorm_mean, dnorm_norm_mean)
            for (int c = 0; c < C; c++) {
                float dnorm = weight[c] * d[c];
                dnorm_mean += dnorm;
                dnorm_norm_mean += dnorm * (x[c] - m) * s;
            }
            dnorm_mean /= C;
            dnorm_norm_mean /= C;
            float* di = dinp + (size_t)n * C;
            #pragma omp simd
            for (int c = 0; c < C; c++) {
                float xhat = (x[c] - m) * s;
                di[c] += (weight[c] * d[c] - dnorm_mean - xhat * dnorm_norm_mean) * s;
            }
        }
        // weight gradients: threads own channel ranges and sum rows in order
        int nth = omp_get_num_threads(), tid = omp_get_thread_num();
        int c0 = C * tid / nth, c1 = C * (tid + 1) / nth;
        for (int n = 0; n < N; n++) {
            const float* d = dout + (size_t)n * C;
            const float* x = inp + (size_t)n * C;
            float m = mean[n], s = rstd[n];
            #pragma omp simd
            for (int c = c0; c < c1; c++) {
                dweight[c] += d[c] * ((x[c] - m) * s);
                dbias[c] += d[c];
            }
        }
    }
}

// out: (N,OC) = inp (N,C) @ weight(OC,C)^T + bias(OC) [+ residual (N,OC) when not NULL], in fp32
void matmul_forward_fp32(float* out, const float* inp, const float* weight, const float* bias, const float* residual,
                    int N, int C, int OC) {
    // one parallel region: each thread writes the bias (and residual) into its own slice of the output,
    // then its slice of the GEMM accumulates on top (beta = 1) while that slice is still in cache
    blas_init();
    double t0 = prof_begin();
    #pragma omp parallel
    {
        int tid = omp_get_thread_num(), nth = omp_get_num_threads(), r0, r1, c0, c1;
        sgemm_slice(tid, nth, N, OC, &r0, &r1, &c0, &c1);
        for (int n = r0; n < r1; n++) {
            float* o = out + (size_t)n * OC;
            if (residual != NULL) {
                const float* r = residual + (size_t)n * OC;
                #pragma omp simd
                for (int i = c0; i < c1; i++) { o[i] = r[i] + bias[i]; }
            } else {
                #pragma omp simd
                for (int i = c0; i < c1; i++) { o[i] = bias[i]; }
            }
        }
        sgemm_part(tid, nth, 0, 1, N, OC, C, 1.0f, inp, C, weight, C, 1.0f, out, OC);
    }
    prof_end(PROF_GEMM, t0);
}

// matmul_forward_fp32's product in bf16 with layer's weights, on inp16 (N,C): the input as its producer
// kept it, in bf16. With a residual one parallel region writes bias + residual into out, and the GEMM
// accumulates on top (DNNL_C_ADD); with a bias only, the GEMM adds it as it writes out (DNNL_C_BIAS, the same
// sums), to out16 (N,OC) rounded to bf16 instead where the layer was made so (qkv). bias NULL: out is
// overwritten (the lm head), or with out16 not NULL out16 is, rounded to bf16.
void matmul_forward_bf16(float* out, bf16* out16, const bf16* inp16, Bf16Linear* lin, int layer, const float* bias,
                         const float* residual, int N, int C, int OC) {
    double t0 = prof_begin();
    // the calls each form was made for: SET no bias or residual (out in fp32, or through fwd16 in bf16); ADD a
    // bias, with or without a residual (fp32); BIAS a bias, no residual (bf16 exactly where made with DNNL_C_BF16)
    int f = lin->fwd_form;
    int fits = f == DNNL_C_SET ? bias == NULL && residual == NULL
             : f == DNNL_C_ADD ? bias != NULL && out16 == NULL
                               : bias != NULL && residual == NULL && (out16 != NULL) == ((f & DNNL_C_BF16) != 0);
    if (!fits) {
        fatal("bf16: a linear layer's forward run in a form it was not made for (bias %s, residual %s, out in %s)",
              bias ? "given" : "none", residual ? "given" : "none", out16 ? "bf16" : "fp32");
    }
    if (out16 != NULL && f == DNNL_C_SET) {
        for (int r0 = 0; r0 < N; r0 += lin->fwd_rows) {
            dnnl_gemm_run(&lin->fwd16, inp16 + (size_t)r0 * C, bf16_linear_w_fwd16(lin, layer), out16 + (size_t)r0 * OC);
        }
        prof_end(PROF_GEMM, t0);
        return;
    }
    if (f & DNNL_C_BIAS) {
        for (int r0 = 0; r0 < N; r0 += lin->fwd_rows) {
            void* o = out16 != NULL ? (void*)(out16 + (size_t)r0 * OC) : (void*)(out + (size_t)r0 * OC);
            dnnl_gemm_run_bias(&lin->fwd, inp16 + (size_t)r0 * C, bf16_linear_w_fwd(lin, layer), bias, o);
        }
        prof_end(PROF_GEMM, t0);
        return;
    }
    if (bias != NULL) {
        #pragma omp parallel
        {
            int tid = omp_get_thread_num(), nth = omp_get_num_threads();
            int r0 = (int)((long)N * tid / nth), r1 = (int)((long)N * (tid + 1) / nth);
            for (int n = r0; n < r1; n++) {
                float* o = out + (size_t)n * OC;
                if (residual != NULL) {
                    const float* r = residual + (size_t)n * OC;
                    #pragma omp simd
                    for (int i = 0; i < OC; i++) { o[i] = r[i] + bias[i]; }
                } else {
                    #pragma omp simd
                    for (int i = 0; i < OC; i++) { o[i] = bias[i]; }
                }
            }
        }
    }
    for (int r0 = 0; r0 < N; r0 += lin->fwd_rows) {
        dnnl_gemm_run(&lin->fwd, inp16 + (size_t)r0 * C, bf16_linear_w_fwd(lin, layer), out + (size_t)r0 * OC);
    }
    prof_end(PROF_GEMM, t0);
}

// out[c] += sum over rows of in (N,cols) for thread tid's columns; rows are summed in order
static inline void colsum_part(int tid, int nth, float* out, const float* in, int N, int cols) {
    int c0 = cols * tid / nth, c1 = cols * (tid + 1) / nth;
    for (int n = 0; n < N; n++) {
        const float* row = in + (size_t)n * cols;
        #pragma omp simd
        for (int c = c0; c < c1; c++) { out[c] += row[c]; }
    }
}

// dinp: (N,C) = dout (N,OC) @ weight (OC,C) (overwritten); dweight (OC,C) += dout^T @ inp; dbias (OC) +=.
// One parallel region: the three outputs are disjoint and each thread's slices of them are independent.
void matmul_backward_fp32(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                          const float* weight, int N, int C, int OC) {
    blas_init();
    double t0 = prof_begin();
    #pragma omp parallel
    {
        int tid = omp_get_thread_num(), nth = omp_get_num_threads();
        sgemm_part(tid, nth, 0, 0, N, C, OC, 1.0f, dout, OC, weight, C, 0.0f, dinp, C);
        sgemm_part(tid, nth, 1, 0, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dweight, C);
        if (dbias != NULL) { colsum_part(tid, nth, dbias, dout, N, OC); }
    }
    prof_end(PROF_GEMM, t0);
}

// matmul_backward_fp32's products in bf16 with layer's weights, on inp16 (N,C) kept in bf16 by its producer:
// dout16 (N,OC) is scratch for dout rounded to bf16, inp_packed (bf16_linear_act_bytes) for inp16 packed;
// dbias from fp32 dout. dout NULL: dout16 holds it already, dbias done (the lm head's dlogits, from
// crossentropy_forward, or the fc layer's d(fch) from gelu_backward_bf16).
void matmul_backward_bf16(float* dinp, float* dweight, float* dbias, const float* dout, const bf16* inp16,
                          Bf16Linear* lin, int layer, int N, int C, int OC, bf16* dout16, void* inp_packed) {
    double t0 = prof_begin();
    if (dout != NULL) {
        #pragma omp parallel
        {
            int tid = omp_get_thread_num(), nth = omp_get_num_threads();
            bf16_convert_rows(dout16, dout, N, OC, OC, tid, nth);
            if (dbias != NULL) { colsum_part(tid, nth, dbias, dout, N, OC); }
        }
    }
    for (int c = 0; c < lin->nchunks; c++) {
        dnnl_gemm_run(bf16_chunk_dinp(lin, c), dout16 + (size_t)c * lin->chunk, bf16_linear_w_dinp(lin, layer, c), dinp);
    }
    void* packed[2] = {inp_packed, (char*)inp_packed + lin->act_bytes[0]};
    for (int k = 0; k < 2; k++) {
        if (lin->act_bytes[k] > 0) { dnnl_gemm_pack_b(&lin->dweight[k], inp16, packed[k]); }
    }
    for (int c = 0; c < lin->nchunks; c++) {
        dnnl_gemm_run(&lin->dweight[bf16_chunk_kind(lin, c)], dout16 + (size_t)c * lin->chunk,
                      packed[bf16_chunk_kind(lin, c)], dweight + (size_t)c * lin->chunk * C);
    }
    prof_end(PROF_GEMM, t0);
}

static inline float gelu(float x) {
    float u = GELU_SCALE * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanhf_vec(u));
}

// out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), elementwise over n; out16 not NULL: out goes there
// instead, rounded to bf16 (the next matmul's operand under --precision bf16)
void gelu_forward(float* out, bf16* out16, const float* inp, size_t n) {
    if (out16 != NULL) {
        #pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++) { out16[i] = bf16_from_float(gelu(inp[i])); }
    } else {
        #pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++) { out[i] = gelu(inp[i]); }
    }
}

// d(GELU(x)) / dx
static inline float gelu_grad(float x) {
    float u = GELU_SCALE * (x + 0.044715f * x * x * x);
    float th = tanhf_vec(u);
    float sech2 = 1.0f - th * th;
    return 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
}

// d (n) holds dout on entry and dinp on exit; inp: the GELU's input
void gelu_backward_inplace(float* d, const float* inp, size_t n) {
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) { d[i] *= gelu_grad(inp[i]); }
}

// gelu_backward_inplace fused with what the next linear layer's bf16 backward does with its result (N,OC):
// dinp16 (N,OC) = dout * gelu'(inp) rounded to bf16, and dbias (OC) += its column sums in fp32. The fp32 dinp
// is never written: matmul_backward_bf16 would only read it back twice (to round it, and for the column
// sums). Threads own column ranges and sum rows in order, as colsum_part does: the same bits.
void gelu_backward_bf16(bf16* dinp16, float* dbias, const float* dout, const float* inp, int N, int OC) {
    #pragma omp parallel
    {
        int tid = omp_get_thread_num(), nth = omp_get_num_threads();
        int c0 = OC * tid / nth, c1 = OC * (tid + 1) / nth;
        for (int n = 0; n < N; n++) {
            const float* d = dout + (size_t)n * OC;
            const float* x = inp + (size_t)n * OC;
            bf16* o = dinp16 + (size_t)n * OC;
            #pragma omp simd
            for (int c = c0; c < c1; c++) {
                float g = d[c] * gelu_grad(x[c]);
                o[c] = bf16_from_float(g);
                dbias[c] += g;
            }
        }
    }
}

// Causal attention computes only the lower triangle of each head's (T,T) square: the rows (or, for the
// products with att^T, the columns) go in blocks of ATT_BLOCK, and a block's GEMMs stop at the diagonal
// (all six of a head's GEMMs: at T = 128 they do 63% of the full squares' work, at T = 1024 52%). Each dot
// product still runs over its keys in order, only without the masked zeros, so the results are those of
// the full squares wherever a GEMM does not split its K range (T up to OpenBLAS's K block, a few hundred).
#define ATT_BLOCK 32

// causal self-attention. qkv: (B,T,3C) with q, k, v each (NH heads of hs = C/NH);
// att: (B,NH,T,T) softmax probabilities, zero above the diagonal; out: (B,T,C).
// Parallel over (b, h); within a head, the products are single-threaded GEMMs on strided views of qkv.
void attention_forward_fp32(float* out, float* att, const float* qkv, int B, int T, int C, int NH) {
    int C3 = 3 * C, hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    blas_init();
    #pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const float* q = qkv + (size_t)b * T * C3 + h * hs;
            const float* k = q + C;
            const float* v = q + 2 * C;
            float* a = att + ((size_t)b * NH + h) * T * T;
            float* o = out + (size_t)b * T * C + h * hs;
            for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
                int r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T;
                float* ab = a + (size_t)r0 * T;
                // scores (rows r0..r1, keys 0..r1) = scale * q @ k^T; the block's upper corner is masked below
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, r1, hs, scale, q + (size_t)r0 * C3, C3,
                            k, C3, 0.0f, ab, T);
                for (int t = r0; t < r1; t++) {
                    float* row = a + (size_t)t * T;
                    float maxval = -FLT_MAX;
                    #pragma omp simd reduction(max:maxval)
                    for (int t2 = 0; t2 <= t; t2++) { maxval = row[t2] > maxval ? row[t2] : maxval; }
                    float sum = 0.0f;
                    #pragma omp simd reduction(+:sum)
                    for (int t2 = 0; t2 <= t; t2++) { float e = expf_vec(row[t2] - maxval); row[t2] = e; sum += e; }
                    float inv = 1.0f / sum;
                    #pragma omp simd
                    for (int t2 = 0; t2 <= t; t2++) { row[t2] *= inv; }
                    for (int t2 = t + 1; t2 < T; t2++) { row[t2] = 0.0f; }
                }
                // out (rows r0..r1) = att @ v over the keys 0..r1
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r1 - r0, hs, r1, 1.0f, ab, T, v, C3, 0.0f,
                            o + (size_t)r0 * C, C);
            }
        }
    }
}

// The softmax's passes over one row of a (T, T) square go in chunks of ATT_W floats, one vector register
// (AVX-512) or two (AVX2), each lane keeping its own maximum and sum until one reduction across lanes at the
// end of the row; the columns past the diagonal in the last chunk are masked. Rows are short (0..t) and
// many: a loop of any length would end each row in a scalar remainder, which took most of the time.
#define ATT_W 16

// the columns the chunks of row t cover: 0..t rounded up to whole chunks, at most T
static inline int att_row_span(int t, int T) {
    int n = (t + ATT_W) / ATT_W * ATT_W;
    return n < T ? n : T;
}

// p16 (T) = softmax over columns 0..t of s (T) times scale, rounded, and zeros past t; s gets the exps
static inline void att_softmax_row(bf16* p16, float* s, int t, int T, float scale) {
    int n = att_row_span(t, T), nv = n / ATT_W * ATT_W;  // nv < n: T is no multiple of ATT_W, a tail
    float mx[ATT_W], sm[ATT_W];
    for (int i = 0; i < ATT_W; i++) { mx[i] = -FLT_MAX; sm[i] = 0.0f; }
    for (int c = 0; c < nv; c += ATT_W) {
        #pragma omp simd
        for (int i = 0; i < ATT_W; i++) {
            float x = c + i <= t ? s[c + i] * scale : -FLT_MAX;
            s[c + i] = x;
            mx[i] = x > mx[i] ? x : mx[i];
        }
    }
    for (int t2 = nv; t2 <= t; t2++) { s[t2] *= scale; mx[0] = s[t2] > mx[0] ? s[t2] : mx[0]; }
    float maxval = -FLT_MAX;
    for (int i = 0; i < ATT_W; i++) { maxval = mx[i] > maxval ? mx[i] : maxval; }
    for (int c = 0; c < nv; c += ATT_W) {
        #pragma omp simd
        for (int i = 0; i < ATT_W; i++) {
            float e = c + i <= t ? expf_vec(s[c + i] - maxval) : 0.0f;
            s[c + i] = e;
            sm[i] += e;
        }
    }
    for (int t2 = nv; t2 <= t; t2++) { s[t2] = expf_vec(s[t2] - maxval); sm[0] += s[t2]; }
    float sum = 0.0f;
    for (int i = 0; i < ATT_W; i++) { sum += sm[i]; }
    float inv = 1.0f / sum;
    #pragma omp simd
    for (int t2 = 0; t2 < n; t2++) { p16[t2] = t2 <= t ? bf16_from_float(s[t2] * inv) : 0; }
    memset(p16 + n, 0, (size_t)(T - n) * sizeof(bf16));
}

// attention_forward_fp32 with bf16 products, on qkv (B, T, 3C) in bf16 (as the qkv product wrote it,
// rounded); out (B, T, C) in bf16 (the next matmul's operand). Kept for attention_backward_bf16: att16 (B, NH,
// T, T) the probabilities in bf16 (zeros past the diagonal) and qkv16 (3, B, NH, T, hs) q, k, v head by head.
// qkv16 may share qkv's memory (the trainer keeps them there): qkv is read only before qkv16 is written.
// scratch (3, B, NH, T, hs) takes q, k, v head by head for the products.
void attention_forward_bf16(bf16* out, bf16* att16, bf16* qkv16, const bf16* qkv, Bf16Attention* ba,
                            bf16* scratch, int B, int T, int C, int NH) {
    int G = ba->group;
    size_t psz = (size_t)B * T * C;  // one part (q, k or v) of all sequences
    float scale = 1.0f / sqrtf((float)(C / NH));
    bf16_to_heads(scratch, NULL, qkv, B, T, C, NH, 3);
    for (int b0 = 0; b0 < B; b0 += G) {
        const bf16* q = scratch + (size_t)b0 * T * C;  // (G, NH, T, hs)
        bf16* a16 = att16 + (size_t)b0 * NH * T * T;   // (G, NH, T, T)
        dnnl_gemm_run(&ba->prim[ATT_SCORES], q, q + psz, ba->s32);
        #pragma omp parallel for schedule(static)
        for (int ht = 0; ht < G * NH * T; ht++) {
            att_softmax_row(a16 + (size_t)ht * T, ba->s32 + (size_t)ht * T, ht % T, T, scale);
        }
        dnnl_gemm_run(&ba->prim[ATT_AV], a16, q + 2 * psz, ba->h32);
        bf16_from_heads(NULL, out, ba->h32, b0, G, T, C, NH, 1, C);
    }
    if (qkv16 != scratch) {
        size_t n = 3 * psz;
        #pragma omp parallel
        {
            int tid = omp_get_thread_num(), nth = omp_get_num_threads();
            size_t i0 = n * tid / nth, i1 = n * (tid + 1) / nth;
            memcpy(qkv16 + i0, scratch + i0, (i1 - i0) * sizeof(bf16));
        }
    }
}

// dqkv: (B,T,3C) overwritten; dout: (B,T,C); scratch: (threads, T, T) one datt per thread.
// att holds the probabilities on entry and is overwritten with d(scores), which the last two GEMMs use.
void attention_backward_fp32(float* dqkv, float* scratch, const float* dout, const float* qkv, float* att,
                             int B, int T, int C, int NH) {
    int C3 = 3 * C, hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    blas_init();
    #pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            float* datt = scratch + (size_t)omp_get_thread_num() * T * T;
            const float* q = qkv + (size_t)b * T * C3 + h * hs;
            const float* k = q + C;
            const float* v = q + 2 * C;
            float* dq = dqkv + (size_t)b * T * C3 + h * hs;
            float* dk = dq + C;
            float* dv = dq + 2 * C;
            const float* d = dout + (size_t)b * T * C + h * hs;
            float* a = att + ((size_t)b * NH + h) * T * T;
            // dv (keys c0..c1) = att^T @ dout over the queries c0..T (att is zero above the diagonal)
            for (int c0 = 0; c0 < T; c0 += ATT_BLOCK) {
                int c1 = c0 + ATT_BLOCK < T ? c0 + ATT_BLOCK : T;
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, c1 - c0, hs, T - c0, 1.0f, a + (size_t)c0 * T + c0, T,
                            d + (size_t)c0 * C, C, 0.0f, dv + (size_t)c0 * C3, C3);
            }
            for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
                int r1 = r0 + ATT_BLOCK < T ? r0 + ATT_BLOCK : T;
                // datt (rows r0..r1, keys 0..r1) = dout @ v^T, then row by row through the softmax, in place
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, r1, hs, 1.0f, d + (size_t)r0 * C, C,
                            v, C3, 0.0f, datt + (size_t)r0 * T, T);
                for (int t = r0; t < r1; t++) {
                    float* row = a + (size_t)t * T;
                    const float* drow = datt + (size_t)t * T;
                    float dsum = 0.0f;
                    #pragma omp simd reduction(+:dsum)
                    for (int t2 = 0; t2 <= t; t2++) { dsum += row[t2] * drow[t2]; }
                    #pragma omp simd
                    for (int t2 = 0; t2 <= t; t2++) { row[t2] = row[t2] * (drow[t2] - dsum) * scale; }
                }
                // dq (rows r0..r1) = dscores @ k over the keys 0..r1
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r1 - r0, hs, r1, 1.0f, a + (size_t)r0 * T, T,
                            k, C3, 0.0f, dq + (size_t)r0 * C3, C3);
            }
            // dk (keys c0..c1) = dscores^T @ q over the queries c0..T
            for (int c0 = 0; c0 < T; c0 += ATT_BLOCK) {
                int c1 = c0 + ATT_BLOCK < T ? c0 + ATT_BLOCK : T;
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, c1 - c0, hs, T - c0, 1.0f, a + (size_t)c0 * T + c0, T,
                            q + (size_t)c0 * C3, C3, 0.0f, dk + (size_t)c0 * C3, C3);
            }
        }
    }
}

// ds16 (T) = d(scores) of row t, rounded, zeros past t: through the softmax from its probabilities p16 (T,
// zeros past t) and d(probabilities) dp (T), times scale
static inline void att_softmax_backward_row(bf16* ds16, const bf16* p16, const float* dp, int t, int T, float scale) {
    int n = att_row_span(t, T), nv = n / ATT_W * ATT_W;
    float sm[ATT_W];
    for (int i = 0; i < ATT_W; i++) { sm[i] = 0.0f; }
    for (int c = 0; c < nv; c += ATT_W) {  // past t the probabilities are zeros and add nothing
        #pragma omp simd
        for (int i = 0; i < ATT_W; i++) { sm[i] += bf16_to_float(p16[c + i]) * dp[c + i]; }
    }
    for (int t2 = nv; t2 <= t; t2++) { sm[0] += bf16_to_float(p16[t2]) * dp[t2]; }
    float dsum = 0.0f;
    for (int i = 0; i < ATT_W; i++) { dsum += sm[i]; }
    #pragma omp simd
    for (int t2 = 0; t2 < n; t2++) { ds16[t2] = t2 <= t ? bf16_from_float(bf16_to_float(p16[t2]) * (dp[t2] - dsum) * scale) : 0; }
    memset(ds16 + n, 0, (size_t)(T - n) * sizeof(bf16));
}

// attention_backward_fp32 with bf16 products, from what attention_forward_bf16 kept: att16 (B, NH, T, T)
// and qkv16 (3, B, NH, T, hs); dout16 (B, NH, T, hs) is scratch for dout rounded. Through the softmax with
// the bf16 probabilities, as the GPU's backward has them. dqkv16 not NULL (the trainer): dqkv goes there
// instead, (B, T, 3C) rounded to bf16, the qkv layer's backward operand, and dbias (3C) += its column sums
// (bf16_from_heads_dout); else dqkv (B, T, 3C) gets it in fp32.
void attention_backward_bf16(float* dqkv, bf16* dqkv16, float* dbias, const float* dout, const bf16* qkv16,
                             const bf16* att16, Bf16Attention* ba, bf16* dout16, int B, int T, int C, int NH) {
    int G = ba->group;
    size_t psz = (size_t)B * T * C, gsz = (size_t)G * T * C;
    float scale = 1.0f / sqrtf((float)(C / NH));
    bf16_to_heads(dout16, dout, NULL, B, T, C, NH, 1);
    float* dq = ba->h32;
    float* dk = dq + gsz;
    float* dv = dk + gsz;
    for (int b0 = 0; b0 < B; b0 += G) {
        const bf16* q = qkv16 + (size_t)b0 * T * C;  // (G, NH, T, hs)
        const bf16* k = q + psz;
        const bf16* v = k + psz;
        const bf16* d = dout16 + (size_t)b0 * T * C;
        const bf16* a16 = att16 + (size_t)b0 * NH * T * T;
        dnnl_gemm_run(&ba->prim[ATT_DV], a16, d, dv);
        dnnl_gemm_run(&ba->prim[ATT_DATT], d, v, ba->s32);
        #pragma omp parallel for schedule(static)
        for (int ht = 0; ht < G * NH * T; ht++) {  // through the softmax into d(scores)
            att_softmax_backward_row(ba->ds16 + (size_t)ht * T, a16 + (size_t)ht * T, ba->s32 + (size_t)ht * T,
                                     ht % T, T, scale);
        }
        dnnl_gemm_run(&ba->prim[ATT_DQ], ba->ds16, k, dq);
        dnnl_gemm_run(&ba->prim[ATT_DK], ba->ds16, q, dk);
        if (dqkv16 != NULL) {
            bf16_from_heads_dout(dqkv16, dbias, ba->h32, b0, G, T, C, NH);
        } else {
            bf16_from_heads(dqkv, NULL, ba->h32, b0, G, T, C, NH, 3, 3 * C);
        }
    }
}

// ----------------------------------------------------------------------------
// one call per layer: each matmul and attention picks its precision. bf: the bf16 products to run, or
// none (fp32: the reference, and every forward at a shape other than the allocated one). In bf16 the
// activations the products read are kept in bf16, as the GPU trainer keeps them, in tensors of half their
// fp32 size (kept_stride): their producers (layernorm_forward, gelu_forward, the attention) write them rounded,
// and the linear layers read them there, forward and backward (half the bytes, and no rounding pass).

// what a layer runs in bf16 (the model's gpt2_bf16 makes it): a linear layer's products at one depth, or
// the attention's, with the model's scratch; all NULL: fp32
typedef struct {
    Bf16Linear* lin;   // matmul_*: the linear layer's primitives and weights
    int layer;         // its depth
    Bf16Attention* att; // attention_*: the attention's primitives
    bf16* a;           // (N, 4C) scratch: the backward's dout in bf16 (a linear layer's, the attention's); the lm
                       // head's: its dlogits, over the logits
    bf16* b;           // (N, 3C) scratch: the attention's q, k, v in bf16 (forward), dqkv in bf16 (backward)
    void* packed;      // the dweight product's right operand (inp) packed
    int dout_ready;    // the backward's dout is in `a` already, in bf16, and its dbias done (the lm head's dlogits,
                       // the fc layer's d(fch) from gelu_backward_bf16, the qkv layer's dqkv from the attention)
    int out16;         // the forward writes out in bf16, in its first half (qkv; the lm head's logits for a loss)
} Bf16Op;

// out: (N,OC) = inp (N,C) @ weight(OC,C)^T + bias(OC) [+ residual (N,OC) when not NULL]; bias NULL: out is
// overwritten (the lm head). In bf16 inp's memory holds it in bf16, and with bf.out16 out's does.
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, const float* residual,
                    int N, int C, int OC, Bf16Op bf) {
    if (bf.lin != NULL) {
        matmul_forward_bf16(out, bf.out16 ? (bf16*)out : NULL, (const bf16*)inp, bf.lin, bf.layer, bias, residual, N,
                            C, OC);
    } else if (bias == NULL) {
        PROF(PROF_GEMM, sgemm(0, 1, N, OC, C, 1.0f, inp, C, weight, C, 0.0f, out, OC));
    } else {
        matmul_forward_fp32(out, inp, weight, bias, residual, N, C, OC);
    }
}

// dinp: (N,C) = dout (N,OC) @ weight (OC,C) (overwritten); dweight (OC,C) += dout^T @ inp; dbias (OC) +=
// (dbias NULL: none). In bf16 inp's memory holds it in bf16, and with bf.dout_ready the call before left dout
// in bf16 in bf.a and did dbias (gelu_backward, attention_backward, the cross-entropy)
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int C, int OC, Bf16Op bf) {
    if (bf.lin != NULL) {
        matmul_backward_bf16(dinp, dweight, dbias, bf.dout_ready ? NULL : dout, (const bf16*)inp, bf.lin, bf.layer,
                             N, C, OC, bf.a, bf.packed);
    } else {
        matmul_backward_fp32(dinp, dweight, dbias, dout, inp, weight, N, C, OC);
    }
}

// causal self-attention, qkv (B,T,3C) -> out (B,T,C), att (B,NH,T,T) the probabilities. In bf16 qkv holds
// (B,T,3C) in bf16 (the qkv product writes it so), out is written in bf16, and the backward's inputs are kept
// in bf16 in the same memory: att holds the probabilities (B,NH,T,T), qkv q, k and v head by head
// (3,B,NH,T,hs).
void attention_forward(float* out, float* att, float* qkv, int B, int T, int C, int NH, Bf16Op bf) {
    if (bf.att != NULL) {
        attention_forward_bf16((bf16*)out, (bf16*)att, (bf16*)qkv, (const bf16*)qkv, bf.att, bf.b, B, T, C, NH);
        return;
    }
    attention_forward_fp32(out, att, qkv, B, T, C, NH);
}

// dqkv: (B,T,3C) overwritten from dout (B,T,C); scratch: (threads, T, T); in fp32 att is overwritten with
// d(scores), in bf16 it is left as it is (qkv and att: what attention_forward left there). In bf16 dqkv goes
// to bf.b instead, in bf16, the qkv layer's backward operand, and dqkv_bias (3C) += its column sums (the qkv
// layer's bias gradient: that backward then reads neither)
void attention_backward(float* dqkv, float* dqkv_bias, float* scratch, const float* dout, const float* qkv,
                        float* att, int B, int T, int C, int NH, Bf16Op bf) {
    if (bf.att != NULL) {
        attention_backward_bf16(NULL, bf.b, dqkv_bias, dout, (const bf16*)qkv, (const bf16*)att, bf.att, bf.a, B, T,
                                C, NH);
    } else {
        attention_backward_fp32(dqkv, scratch, dout, qkv, att, B, T, C, NH);
    }
}

// d (N,OC) holds dout on entry and, in fp32, dinp on exit; inp: the GELU's input. In bf16 dinp goes to bf.a
// instead, in bf16, the fc layer's backward operand, and dbias (OC) += its column sums (the fc layer's bias
// gradient: that backward then reads neither)
void gelu_backward(float* d, float* dbias, const float* inp, int N, int OC, Bf16Op bf) {
    if (bf.lin != NULL) {
        gelu_backward_bf16(bf.a, dbias, d, inp, N, OC);
    } else {
        gelu_backward_inplace(d, inp, (size_t)N * OC);
    }
}

// crossentropy_forward on logits kept in bf16 (--precision bf16, as the GPU trainer keeps them): the same
// losses, lse and dlogits (rounded to bf16, written over the logits) as the fp32 form computes from the same
// values in fp32, bit for bit: each row goes to the thread's row of scratch (threads, Vp) in fp32, which stays
// in the cache, and its exps are taken there, in the same order.
void crossentropy_forward_bf16(float* losses, float* lse, bf16* logits16, const int* targets, int N, int V, int Vp,
                               float dloss, float* scratch, int threads) {
    #pragma omp parallel for schedule(static) num_threads(threads)
    for (int n = 0; n < N; n++) {
        bf16* x = logits16 + (size_t)n * Vp;
        float* e = scratch + (size_t)omp_get_thread_num() * Vp;
        int t = targets[n];
        float maxval = -FLT_MAX;  // the row's maximum taken as it is widened (one pass fewer)
        #pragma omp simd reduction(max:maxval)
        for (int i = 0; i < V; i++) { float v = bf16_to_float(x[i]); e[i] = v; maxval = v > maxval ? v : maxval; }
        float xt = e[t];
        float sum = 0.0f;
        #pragma omp simd reduction(+:sum)
        for (int i = 0; i < V; i++) { float ei = expf_vec(e[i] - maxval); e[i] = ei; sum += ei; }
        lse[n] = maxval + logf(sum);
        losses[n] = lse[n] - xt;
        if (dloss == 0.0f) { continue; }
        float k = dloss / sum;
        #pragma omp simd
        for (int i = 0; i < V; i++) { x[i] = bf16_from_float(e[i] * k); }
        for (int i = V; i < Vp; i++) { x[i] = 0; }
        x[t] = bf16_from_float(e[t] * k - dloss);
    }
}

// the lm_head's loss, fused with the softmax and, in training, with its backward: logits (N,Vp), only the
// first V columns are real. Writes lse (N) = log sum exp of each row and losses (N) = lse - logit[target].
// dloss != 0 (a training forward, or a backward whose forward did not do it): also dlogits =
// (softmax - onehot(target)) * dloss over the logits, padded columns 0, each row while it is still in cache:
// each exp is taken once, kept in the row for the sum and then scaled (one pass over the logits in all, where
// a separate backward read them again and took every exp a second time). dloss 0: the logits stay as they are
// (eval, sampling). logits16 != NULL (--precision bf16): the logits are there, (N,Vp) in bf16, and
// crossentropy_forward_bf16 above runs on them, with scratch (threads, Vp).
void crossentropy_forward(float* losses, float* lse, float* logits, bf16* logits16, const int* targets, int N, int V,
                          int Vp, float dloss, float* scratch, int threads) {
    if (logits16 != NULL) {
        crossentropy_forward_bf16(losses, lse, logits16, targets, N, V, Vp, dloss, scratch, threads);
        return;
    }
    #pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float* x = logits + (size_t)n * Vp;
        int t = targets[n];
        float xt = x[t];
        float maxval = -FLT_MAX;
        #pragma omp simd reduction(max:maxval)
        for (int i = 0; i < V; i++) { maxval = x[i] > maxval ? x[i] : maxval; }
        float sum = 0.0f;
        if (dloss == 0.0f) {
            #pragma omp simd reduction(+:sum)
            for (int i = 0; i < V; i++) { sum += expf_vec(x[i] - maxval); }
        } else {
            #pragma omp simd reduction(+:sum)
            for (int i = 0; i < V; i++) { float e = expf_vec(x[i] - maxval); x[i] = e; sum += e; }
        }
        lse[n] = maxval + logf(sum);
        losses[n] = lse[n] - xt;
        if (dloss == 0.0f) { continue; }
        float k = dloss / sum;
        #pragma omp simd
        for (int i = 0; i < V; i++) { x[i] *= k; }
        for (int i = V; i < Vp; i++) { x[i] = 0.0f; }
        x[t] -= dloss;
    }
}


// ----------------------------------------------------------------------------
// GPT-2 model

// GPT2Config (max_seq_len, vocab_size, padded_vocab_size, num_layers, num_heads, channels) and the
// parameter layout are part of the checkpoint format: llmc/checkpoint.h

typedef struct {
    float* wte;      // (Vp, C)
    float* wpe;      // (maxT, C)
    float* ln1w;     // (L, C)
    float* ln1b;     // (L, C)
    float* qkvw;     // (L, 3*C, C)
    float* qkvb;     // (L, 3*C)
    float* attprojw; // (L, C, C)
    float* attprojb; // (L, C)
    float* ln2w;     // (L, C)
    float* ln2b;     // (L, C)
    float* fcw;      // (L, 4*C, C)
    float* fcb;      // (L, 4*C)
    float* fcprojw;  // (L, C, 4*C)
    float* fcprojb;  // (L, C)
    float* lnfw;     // (C)
    float* lnfb;     // (C)
} ParameterTensors;

static void point_parameters(ParameterTensors* p, const size_t sizes[NUM_PARAMETER_TENSORS], float* memory) {
    float** ptrs[NUM_PARAMETER_TENSORS] = {&p->wte, &p->wpe, &p->ln1w, &p->ln1b, &p->qkvw, &p->qkvb,
        &p->attprojw, &p->attprojb, &p->ln2w, &p->ln2b, &p->fcw, &p->fcb, &p->fcprojw, &p->fcprojb,
        &p->lnfw, &p->lnfb};
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) { *(ptrs[i]) = memory; memory += sizes[i]; }
}

// Activations for (B, T) at allocation; per-layer tensors are strided by the allocated size so that
// a forward at smaller (B, T) (sampling) reuses the same arena. The backward needs only three
// scratch tensors because it walks the layers in reverse, accumulating into dresidual.
#define NUM_ACTIVATION_TENSORS 23
typedef struct {
    float* encoded;   // (B, T, C)
    float* ln1;       // (L, B, T, C); in bf16 (at the allocated shape) in bf16, each layer kept_stride floats
    float* ln1_mean;  // (L, B, T)
    float* ln1_rstd;  // (L, B, T)
    float* qkv;       // (L, B, T, 3*C); in bf16 each layer holds q, k, v in bf16 (3, B, NH, T, hs), as ln1
    float* att;       // (L, B, NH, T, T) softmax probabilities; in bf16 in bf16, as ln1
    float* atty;      // (L, B, T, C); in bf16 in bf16, as ln1
    float* residual2; // (L, B, T, C)
    float* ln2;       // (L, B, T, C); in bf16 in bf16, as ln1
    float* ln2_mean;  // (L, B, T)
    float* ln2_rstd;  // (L, B, T)
    float* fch;       // (L, B, T, 4*C)
    float* fch_gelu;  // (L, B, T, 4*C); in bf16 in bf16, as ln1
    float* residual3; // (L, B, T, C)
    float* lnf;       // (B, T, C); in bf16 in bf16, in its first half
    float* lnf_mean;  // (B, T)
    float* lnf_rstd;  // (B, T)
    float* logits;    // (B, T, Vp); dlogits after a training forward or a backward; in bf16 with targets both
                      // are bf16 (B, T, Vp) in the first half
    float* lse;       // (B, T) log-sum-exp of each logits row
    float* losses;    // (B, T)
    float* dresidual; // (B, T, C) backward: gradient of the residual stream
    float* dbuf_c;    // (B, T, C) backward scratch
    float* dbuf_4c;   // (B, T, 4*C) backward scratch (also dqkv, (B, T, 3*C))
    // not counted in NUM_ACTIVATION_TENSORS: per-thread attention scratch
    float* att_scratch; // (threads, T, T)
} ActivationTensors;

enum { LIN_QKV, LIN_ATTPROJ, LIN_FC, LIN_FCPROJ, LIN_LM, NUM_LINEARS, BF16_ATTENTION = NUM_LINEARS };

typedef struct {
    GPT2Config config;
    ParameterTensors params;
    size_t param_sizes[NUM_PARAMETER_TENSORS];
    float* params_memory;
    size_t num_parameters;
    ParameterTensors grads;
    float* grads_memory;
    float* m_memory;
    float* v_memory;
    WeightAverage* average;   // weights kept apart (llmc/average.h): with an EMA decay, the AdamW pass updates
                              // it; NULL: none
    ActivationTensors acts;
    size_t act_sizes[NUM_ACTIVATION_TENSORS];
    float* acts_memory;
    size_t num_activations;
    int batch_size;   // B of the allocation
    int seq_len;      // T of the allocation
    int cur_B, cur_T; // of the last forward
    const int* targets; // of the last forward (NULL: no loss)
    float mean_loss;  // of the last forward with targets, -1 otherwise
    float dlogits_scale; // the last forward also wrote the dlogits for this dloss_scale (0: it did not)
    int num_threads;
    // --precision bf16 (gpt2_set_precision): every matmul in bf16 at the allocated (B, T);
    // a forward at another shape (sampling) runs in fp32. NULL / 0 in fp32.
    int bf16;                 // 1: bf16 matmuls, and the tensors bf16 keeps (ln1, qkv, att, atty, ln2, fch_gelu)
                              // at half their fp32 size per layer (kept_stride)
    int bf16_fresh;           // params_bf16 holds the current params (whoever writes params clears it)
    bf16* params_bf16;        // (P) params rounded to bf16, same layout as params_memory
    bf16* bf16_a;             // (B*T, 4C) scratch: the layers' backward's dout in bf16
    bf16* bf16_b;             // (B*T, 3C) scratch: the attention's q, k, v in bf16
    void* bf16_b_packed;      // bf16_b packed for the dweight GEMM (the largest linear's need)
    float* ce_scratch;        // (num_threads, Vp) the cross-entropy's exps, a row per thread
    Bf16Linear lin[NUM_LINEARS]; // primitives and packed weights of qkv, attproj, fc, fcproj, lm head (wte)
    Bf16Attention att16;      // the attention's batched products and their scratch
} GPT2;

static void gpt2_setup_params(GPT2* model) {
    GPT2Config* c = &model->config;
    if (c->channels % c->num_heads != 0) { fatal("model: channels %d not divisible by heads %d", c->channels, c->num_heads); }
    gpt2_param_sizes(model->param_sizes, c);
    model->num_parameters = gpt2_num_parameters(c);
    model->params_memory = (float*)mallocCheck(model->num_parameters * sizeof(float));
    point_parameters(&model->params, model->param_sizes, model->params_memory);
    model->grads_memory = NULL;
    model->m_memory = NULL;
    model->v_memory = NULL;
    model->average = NULL;
    model->acts_memory = NULL;
    model->batch_size = 0;
    model->seq_len = 0;
    model->mean_loss = -1.0f;
    model->dlogits_scale = 0.0f;
    model->bf16 = 0;
    model->bf16_fresh = 0;
    model->params_bf16 = NULL;
    model->bf16_a = model->bf16_b = NULL;
    model->bf16_b_packed = NULL;
    model->ce_scratch = NULL;
    memset(model->lin, 0, sizeof(model->lin));
    memset(&model->att16, 0, sizeof(model->att16));
}

void gpt2_build_from_checkpoint(GPT2* model, const char* checkpoint_path) {
    model_read_header(checkpoint_path, &model->config);
    gpt2_setup_params(model);
    model_read_params(checkpoint_path, model->params_memory, model->num_parameters);
}

// llm.c's init: N(0, 0.02) for the 2-D weights, residual projections (attprojw, fcprojw) scaled by
// 1/sqrt(2L), LayerNorm weights 1, biases 0, padded wte rows 0. Tensors are drawn in file order from
// one xorshift* stream seeded with `seed`, through Box-Muller (llmc/rand.h).
void gpt2_build_from_random(GPT2* model, int depth, int vocab_size, uint64_t seed) {
    if (depth <= 0 || vocab_size <= 0) { fatal("model: depth %d and vocab %d must be positive", depth, vocab_size); }
    GPT2Config* c = &model->config;
    c->max_seq_len = 1024;
    c->vocab_size = vocab_size;
    c->padded_vocab_size = (vocab_size + 127) / 128 * 128;
    c->num_layers = depth;
    c->num_heads = depth;
    c->channels = 64 * depth;
    gpt2_setup_params(model);
    uint64_t rng = random_state(seed, 0);
    float residual_std = 0.02f / sqrtf(2.0f * depth);
    ParameterTensors* p = &model->params;
    size_t C = c->channels;
    memset(model->params_memory, 0, model->num_parameters * sizeof(float));
    normal_fill(p->wte, (size_t)vocab_size * C, 0.0f, 0.02f, &rng);
    normal_fill(p->wpe, model->param_sizes[1], 0.0f, 0.02f, &rng);
    for (size_t i = 0; i < model->param_sizes[2]; i++) { p->ln1w[i] = 1.0f; }
    normal_fill(p->qkvw, model->param_sizes[4], 0.0f, 0.02f, &rng);
    normal_fill(p->attprojw, model->param_sizes[6], 0.0f, residual_std, &rng);
    for (size_t i = 0; i < model->param_sizes[8]; i++) { p->ln2w[i] = 1.0f; }
    normal_fill(p->fcw, model->param_sizes[10], 0.0f, 0.02f, &rng);
    normal_fill(p->fcprojw, model->param_sizes[12], 0.0f, residual_std, &rng);
    for (size_t i = 0; i < C; i++) { p->lnfw[i] = 1.0f; }
}

// floats between one layer's part of a tensor bf16 keeps and the next: n (one layer's floats in fp32), or
// in bf16 the floats that hold n bf16, rounded up to whole floats
static size_t kept_stride(const GPT2* model, size_t n) { return model->bf16 ? (n + 1) / 2 : n; }

// the activation arena for (B, T) (the kept tensors at kept_stride), zeroed, and the tensors pointed into it
static void gpt2_allocate_activations(GPT2* model, int B, int T) {
    GPT2Config* c = &model->config;
    size_t L = c->num_layers, NH = c->num_heads, C = c->channels, Vp = c->padded_vocab_size;
    size_t BT = (size_t)B * T;
    size_t* s = model->act_sizes;
    s[0] = BT * C;            // encoded
    s[1] = L * kept_stride(model, BT * C);      // ln1
    s[2] = L * BT;            // ln1_mean
    s[3] = L * BT;            // ln1_rstd
    s[4] = L * kept_stride(model, BT * 3 * C);  // qkv
    s[5] = L * kept_stride(model, B * NH * (size_t)T * T); // att
    s[6] = L * kept_stride(model, BT * C);      // atty
    s[7] = L * BT * C;        // residual2
    s[8] = L * kept_stride(model, BT * C);      // ln2
    s[9] = L * BT;            // ln2_mean
    s[10] = L * BT;           // ln2_rstd
    s[11] = L * BT * 4 * C;   // fch
    s[12] = L * kept_stride(model, BT * 4 * C); // fch_gelu
    s[13] = L * BT * C;       // residual3
    s[14] = BT * C;           // lnf
    s[15] = BT;               // lnf_mean
    s[16] = BT;               // lnf_rstd
    s[17] = BT * Vp;          // logits
    s[18] = BT;               // lse
    s[19] = BT;               // losses
    s[20] = BT * C;           // dresidual
    s[21] = BT * C;           // dbuf_c
    s[22] = BT * 4 * C;       // dbuf_4c
    model->num_threads = omp_get_max_threads();
    size_t scratch = (size_t)model->num_threads * T * T;
    size_t total = scratch;
    for (int i = 0; i < NUM_ACTIVATION_TENSORS; i++) { total += s[i]; }
    model->num_activations = total;
    model->acts_memory = (float*)mallocCheck(total * sizeof(float));
    // first touch in parallel, so pages land where the threads that use them run
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < total; i++) { model->acts_memory[i] = 0.0f; }
    float** ptrs[NUM_ACTIVATION_TENSORS] = {&model->acts.encoded, &model->acts.ln1, &model->acts.ln1_mean,
        &model->acts.ln1_rstd, &model->acts.qkv, &model->acts.att, &model->acts.atty, &model->acts.residual2,
        &model->acts.ln2, &model->acts.ln2_mean, &model->acts.ln2_rstd, &model->acts.fch, &model->acts.fch_gelu,
        &model->acts.residual3, &model->acts.lnf, &model->acts.lnf_mean, &model->acts.lnf_rstd,
        &model->acts.logits, &model->acts.lse, &model->acts.losses, &model->acts.dresidual,
        &model->acts.dbuf_c, &model->acts.dbuf_4c};
    float* mem = model->acts_memory;
    for (int i = 0; i < NUM_ACTIVATION_TENSORS; i++) { *(ptrs[i]) = mem; mem += s[i]; }
    model->acts.att_scratch = mem;
}

// allocates gradients, AdamW state and activations for batches up to (B, T), once
void gpt2_allocate(GPT2* model, int B, int T) {
    GPT2Config* c = &model->config;
    if (B <= 0 || T <= 0 || T > c->max_seq_len || (size_t)B * T > (1u << 24)) {
        fatal("model: cannot allocate for B=%d T=%d (max sequence length %d)", B, T, c->max_seq_len);
    }
    if (model->acts_memory != NULL) { fatal("model: gpt2_allocate called twice"); }
    gpt2_allocate_activations(model, B, T);
    model->grads_memory = (float*)callocCheck(model->num_parameters, sizeof(float));
    point_parameters(&model->grads, model->param_sizes, model->grads_memory);
    model->m_memory = (float*)callocCheck(model->num_parameters, sizeof(float));
    model->v_memory = (float*)callocCheck(model->num_parameters, sizeof(float));
    model->batch_size = B;
    model->seq_len = T;
}

// the packed bf16 weights follow params_bf16 (after any write to it)
static void gpt2_bf16_pack(GPT2* model) {
    for (int i = 0; i < NUM_LINEARS; i++) { bf16_linear_pack(&model->lin[i]); }
}

// params_bf16 = params rounded to nearest even (at set-up and after any write to params but AdamW's, which
// rounds as it updates), then packed
static void gpt2_bf16_sync(GPT2* model) {
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < model->num_parameters; i++) { model->params_bf16[i] = bf16_from_float(model->params_memory[i]); }
    gpt2_bf16_pack(model);
    model->bf16_fresh = 1;
}

// after an update pass that also rounded params_bf16 (gpt2_update, hybrid mode's fused pass): the packed
// weights follow
static void gpt2_bf16_updated(GPT2* model) {
    if (model->params_bf16 == NULL) { return; }
    gpt2_bf16_pack(model);
    model->bf16_fresh = 1;
}

// bf16_on = 1: every matmul in bf16 from here on: the bf16 weight copy, the scratch and the
// oneDNN primitives for the allocated (B, T), made once (after gpt2_allocate; exits when oneDNN is absent)
void gpt2_set_precision(GPT2* model, int bf16_on) {
    if (model->acts_memory == NULL) { fatal("model: gpt2_set_precision before gpt2_allocate"); }
    if (bf16_on && !dnnl_available()) { fatal("--precision bf16: this build has no oneDNN (install libdnnl-dev and rebuild)"); }
    if (model->bf16 != bf16_on) {  // the arena made again, its kept tensors at their size in this precision
        free(model->acts_memory);
        model->bf16 = bf16_on;
        gpt2_allocate_activations(model, model->batch_size, model->seq_len);
    }
    if (!bf16_on) { return; }
    model->bf16_fresh = 0;
    if (model->params_bf16 != NULL) { return; }
    int N = model->batch_size * model->seq_len, C = model->config.channels, Vp = model->config.padded_vocab_size;
    int L = model->config.num_layers;
    model->params_bf16 = (bf16*)callocCheck(model->num_parameters, sizeof(bf16));  // filled by gpt2_bf16_sync
    model->bf16_a = (bf16*)mallocCheck((size_t)N * 4 * C * sizeof(bf16));
    model->bf16_b = (bf16*)mallocCheck((size_t)N * 3 * C * sizeof(bf16));
    model->ce_scratch = (float*)mallocCheck((size_t)model->num_threads * Vp * sizeof(float));
    #define W16(field) (model->params_bf16 + (model->params.field - model->params_memory))  // field's bf16 copy
    // Packed weights pay where one weight serves many rows, as the packing after each update costs about
    // what the matmul's own copying costs per call: the lm head's (Vp x C; its products are a large share
    // of a bf16 step) on avx512_bf16 CPUs, but not with AMX, whose products ran as fast on the plain
    // weights, so the packing was only a cost; the layers' from 4096 rows (B*T) on: below that, packing
    // the layers' costs about what it saves (docs/benchmark.md). On AMX the lm head's single dinp product
    // (below 1024 rows: K = Vp) sums in another order plain than packed: bf16 losses there move by about 1e-5.
    int pack_layers = N >= 4096, pack_lm = !dnnl_isa_amx();
    bf16_linear_create(&model->lin[LIN_QKV], N, C, 3 * C, DNNL_C_BIAS | DNNL_C_BF16, W16(qkvw), L, pack_layers,
                       BF16_CHUNK);
    bf16_linear_create(&model->lin[LIN_ATTPROJ], N, C, C, DNNL_C_ADD, W16(attprojw), L, pack_layers, BF16_CHUNK);
    bf16_linear_create(&model->lin[LIN_FC], N, C, 4 * C, DNNL_C_BIAS, W16(fcw), L, pack_layers, BF16_CHUNK);
    bf16_linear_create(&model->lin[LIN_FCPROJ], N, 4 * C, C, DNNL_C_ADD, W16(fcprojw), L, pack_layers, BF16_CHUNK);
    // the lm head in pieces from 1024 rows on: at 256 rows one product was as fast or faster (docs/benchmark.md)
    bf16_linear_create(&model->lin[LIN_LM], N, C, Vp, DNNL_C_SET, W16(wte), 1, pack_lm, N >= 1024 ? BF16_CHUNK : Vp);  // tied to wte
    #undef W16
    int NH = model->config.num_heads;
    bf16_attention_create(&model->att16, bf16_attention_group(model->batch_size, model->seq_len, NH), model->seq_len, C, NH);
    size_t act = 0;
    for (int i = 0; i < NUM_LINEARS; i++) {
        size_t b = bf16_linear_act_bytes(&model->lin[i]);
        act = b > act ? b : act;
    }
    model->bf16_b_packed = aligned_alloc(64, act);
    if (model->bf16_b_packed == NULL) { fatal("bf16: out of memory for %zu bytes of scratch", act); }
    gpt2_bf16_sync(model);
}

// what layer `which` (a LIN_*, or BF16_ATTENTION) at depth `layer` runs in bf16 when `on` (a pass at the
// allocated shape of a bf16 model), else nothing: fp32
static Bf16Op gpt2_bf16(GPT2* model, int on, int which, int layer) {
    Bf16Op op;
    memset(&op, 0, sizeof(op));
    if (!on) { return op; }
    if (which == BF16_ATTENTION) { op.att = &model->att16; } else { op.lin = &model->lin[which]; }
    op.layer = layer;
    op.a = model->bf16_a;
    op.b = model->bf16_b;
    op.packed = model->bf16_b_packed;
    // the backward's dout in bf16, its dbias done, from the call before: the lm head's dlogits from
    // crossentropy_forward (over the logits), the fc layer's d(fch) from gelu_backward, qkv's from the attention's
    op.dout_ready = which == LIN_LM || which == LIN_FC || which == LIN_QKV;
    op.out16 = which == LIN_QKV;      // q, k, v for the attention in bf16 (the lm head's: set by the forward)
    if (which == LIN_LM) { op.a = (bf16*)model->acts.logits; }
    if (which == LIN_QKV) { op.a = model->bf16_b; }  // the attention's backward writes dqkv there
    return op;
}

// layer l's activations (the kept ones at kept_stride) and its input, the residual stream before it
typedef struct {
    float *residual, *ln1, *ln1_mean, *ln1_rstd, *qkv, *att, *atty, *residual2, *ln2, *ln2_mean, *ln2_rstd, *fch,
          *fch_gelu, *residual3;
} LayerActs;

static LayerActs gpt2_layer_acts(const GPT2* model, int l) {
    const ActivationTensors* a = &model->acts;
    size_t ABT = (size_t)model->batch_size * model->seq_len, C = model->config.channels;
    size_t NH = model->config.num_heads;
    LayerActs x;
    x.residual = l == 0 ? a->encoded : a->residual3 + (l - 1) * ABT * C;
    x.ln1 = a->ln1 + l * kept_stride(model, ABT * C);
    x.ln1_mean = a->ln1_mean + l * ABT;
    x.ln1_rstd = a->ln1_rstd + l * ABT;
    x.qkv = a->qkv + l * kept_stride(model, ABT * 3 * C);
    x.att = a->att + l * kept_stride(model, ABT * NH * model->seq_len);
    x.atty = a->atty + l * kept_stride(model, ABT * C);
    x.residual2 = a->residual2 + l * ABT * C;
    x.ln2 = a->ln2 + l * kept_stride(model, ABT * C);
    x.ln2_mean = a->ln2_mean + l * ABT;
    x.ln2_rstd = a->ln2_rstd + l * ABT;
    x.fch = a->fch + l * ABT * 4 * C;
    x.fch_gelu = a->fch_gelu + l * kept_stride(model, ABT * 4 * C);
    x.residual3 = a->residual3 + l * ABT * C;
    return x;
}

// inputs, targets: (B, T) token ids; targets may be NULL (logits only, mean_loss = -1).
// After it: acts.logits (B,T,Vp) (in bf16 with targets under --precision bf16) and, with targets,
// acts.losses (B,T) and mean_loss.
// dloss_scale != 0 (gpt2_forward_train): a training forward, which also turns the logits into the dlogits
// of gpt2_backward with the same dloss_scale (fused with the loss, see crossentropy_forward).
static void gpt2_forward_impl(GPT2* model, const int* inputs, const int* targets, int B, int T, float dloss_scale) {
    GPT2Config* c = &model->config;
    if (model->acts_memory == NULL) { fatal("model: gpt2_forward before gpt2_allocate"); }
    if (B <= 0 || T <= 0 || B > model->batch_size || T > model->seq_len || (size_t)B * T > (size_t)model->batch_size * model->seq_len) {
        fatal("model: forward with B=%d T=%d, allocated for B=%d T=%d", B, T, model->batch_size, model->seq_len);
    }
    int L = c->num_layers, NH = c->num_heads, C = c->channels, V = c->vocab_size, Vp = c->padded_vocab_size;
    for (int i = 0; i < B * T; i++) {
        if (inputs[i] < 0 || inputs[i] >= V || (targets != NULL && (targets[i] < 0 || targets[i] >= V))) {
            fatal("model: token id out of range [0, %d) at position %d", V, i);
        }
    }
    model->cur_B = B;
    model->cur_T = T;
    model->targets = targets;
    size_t BT = (size_t)B * T, ABT = (size_t)model->batch_size * model->seq_len;  // ABT: the allocated rows
    ParameterTensors p = model->params;
    ActivationTensors a = model->acts;
    // bf16 matmuls at the allocated shape only (their primitives are made for it); at another shape the kept
    // tensors hold fp32 in their halves
    int lp = model->bf16 && B == model->batch_size && T == model->seq_len;
    if (model->bf16 && !lp && 2 * BT > ABT) {
        fatal("model: a forward at B=%d T=%d under bf16 (fp32 at a shape but the allocated one) needs at most half "
              "the allocated B*T = %zu", B, T, ABT);
    }
    if (lp && !model->bf16_fresh) { gpt2_bf16_sync(model); }
    PROF(PROF_ENCODER, encoder_forward(a.encoded, inputs, p.wte, p.wpe, B, T, C));
    for (int l = 0; l < L; l++) {
        LayerActs x = gpt2_layer_acts(model, l);
        PROF(PROF_LAYERNORM, layernorm_forward(x.ln1, lp ? (bf16*)x.ln1 : NULL, x.ln1_mean, x.ln1_rstd, x.residual,
                                               p.ln1w + l * C, p.ln1b + l * C, BT, C));
        matmul_forward(x.qkv, x.ln1, p.qkvw + (size_t)l * 3 * C * C, p.qkvb + l * 3 * C, NULL, BT, C, 3 * C,
                       gpt2_bf16(model, lp, LIN_QKV, l));
        PROF(PROF_ATTENTION, attention_forward(x.atty, x.att, x.qkv, B, T, C, NH, gpt2_bf16(model, lp, BF16_ATTENTION, l)));
        matmul_forward(x.residual2, x.atty, p.attprojw + (size_t)l * C * C, p.attprojb + l * C, x.residual, BT, C, C,
                       gpt2_bf16(model, lp, LIN_ATTPROJ, l));
        PROF(PROF_LAYERNORM, layernorm_forward(x.ln2, lp ? (bf16*)x.ln2 : NULL, x.ln2_mean, x.ln2_rstd, x.residual2,
                                               p.ln2w + l * C, p.ln2b + l * C, BT, C));
        matmul_forward(x.fch, x.ln2, p.fcw + (size_t)l * 4 * C * C, p.fcb + l * 4 * C, NULL, BT, C, 4 * C,
                       gpt2_bf16(model, lp, LIN_FC, l));
        PROF(PROF_GELU, gelu_forward(x.fch_gelu, lp ? (bf16*)x.fch_gelu : NULL, x.fch, BT * 4 * C));
        matmul_forward(x.residual3, x.fch_gelu, p.fcprojw + (size_t)l * C * 4 * C, p.fcprojb + l * C, x.residual2, BT,
                       4 * C, C, gpt2_bf16(model, lp, LIN_FCPROJ, l));
    }
    const float* last = gpt2_layer_acts(model, L - 1).residual3;
    PROF(PROF_LAYERNORM, layernorm_forward(a.lnf, lp ? (bf16*)a.lnf : NULL, a.lnf_mean, a.lnf_rstd, last, p.lnfw, p.lnfb, BT, C));
    // lm_head tied to wte: logits (BT, Vp) = lnf @ wte^T. In bf16 with targets they are kept in bf16 (in the
    // first half of their fp32 tensor), as the GPU trainer keeps them: the loss reads them rounded, and the
    // dlogits go over them. Without targets (text) they are fp32.
    Bf16Op lm = gpt2_bf16(model, lp, LIN_LM, 0);
    lm.out16 = lp && targets != NULL;
    matmul_forward(a.logits, a.lnf, p.wte, NULL, NULL, BT, C, Vp, lm);
    model->dlogits_scale = 0.0f;
    if (targets != NULL) {
        float dloss = dloss_scale / (float)BT;
        PROF(PROF_CROSSENTROPY, crossentropy_forward(a.losses, a.lse, a.logits, lp ? (bf16*)a.logits : NULL, targets,
                                                     BT, V, Vp, dloss, model->ce_scratch, model->num_threads));
        double sum = 0.0;  // in order: deterministic
        for (size_t i = 0; i < BT; i++) { sum += a.losses[i]; }
        model->mean_loss = (float)(sum / BT);
        model->dlogits_scale = dloss_scale;
    } else {
        model->mean_loss = -1.0f;
    }
}

void gpt2_forward(GPT2* model, const int* inputs, const int* targets, int B, int T) {
    gpt2_forward_impl(model, inputs, targets, B, T, 0.0f);
}

// the forward of a training step: gpt2_forward, plus the dlogits that gpt2_backward(..., dloss_scale) starts
// from (the logits are gone after it)
void gpt2_forward_train(GPT2* model, const int* inputs, const int* targets, int B, int T, float dloss_scale) {
    if (targets == NULL || dloss_scale == 0.0f) { fatal("model: gpt2_forward_train needs targets and a dloss_scale"); }
    gpt2_forward_impl(model, inputs, targets, B, T, dloss_scale);
}

void gpt2_zero_grad(GPT2* model) {
    if (model->grads_memory == NULL) { return; }
    #pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < model->num_parameters; i++) { model->grads_memory[i] = 0.0f; }
}

// Accumulates (+=) into grads the gradient of dloss_scale * mean loss of the last forward, i.e. each
// position's loss gets weight dloss_scale / (B*T). With gradient accumulation over k micro batches,
// dloss_scale = 1/k gives the gradient of the mean loss over all of them. inputs and targets must be
// those of the last forward. After gpt2_forward_train with the same dloss_scale the dlogits are there
// already; after gpt2_forward they are made here (acts.logits become dlogits; in bf16 mode, in bf16). A
// training forward for another dloss_scale leaves no logits to make them from: an error.
void gpt2_backward(GPT2* model, const int* inputs, const int* targets, float dloss_scale) {
    if (model->targets == NULL || targets == NULL) { fatal("model: gpt2_backward needs a forward with targets"); }
    if (dloss_scale == 0.0f) { fatal("model: gpt2_backward with dloss_scale 0"); }
    GPT2Config* c = &model->config;
    int B = model->cur_B, T = model->cur_T;
    int L = c->num_layers, NH = c->num_heads, C = c->channels, V = c->vocab_size, Vp = c->padded_vocab_size;
    size_t BT = (size_t)B * T;
    ParameterTensors p = model->params;
    ParameterTensors g = model->grads;
    ActivationTensors a = model->acts;
    // the softmax + cross-entropy backward (unless the forward did it), then the lm_head
    int lp = model->bf16 && B == model->batch_size && T == model->seq_len;  // as the forward ran
    if (model->dlogits_scale != dloss_scale) {  // the dlogits over the logits (fp32, or bf16 in bf16)
        if (model->dlogits_scale != 0.0f) {
            fatal("model: gpt2_backward with dloss_scale %g after a training forward for %g (its logits are gone)",
                  dloss_scale, model->dlogits_scale);
        }
        float dloss = dloss_scale / (float)BT;
        PROF(PROF_CROSSENTROPY, crossentropy_forward(a.losses, a.lse, a.logits, lp ? (bf16*)a.logits : NULL, targets,
                                                     BT, V, Vp, dloss, model->ce_scratch, model->num_threads));
        model->dlogits_scale = dloss_scale;
    }
    matmul_backward(a.dbuf_c, g.wte, NULL, a.logits, a.lnf, p.wte, BT, C, Vp, gpt2_bf16(model, lp, LIN_LM, 0));
    memset(a.dresidual, 0, BT * C * sizeof(float));
    PROF(PROF_LAYERNORM, layernorm_backward(a.dresidual, g.lnfw, g.lnfb, a.dbuf_c, gpt2_layer_acts(model, L - 1).residual3,
                                            p.lnfw, a.lnf_mean, a.lnf_rstd, BT, C));
    for (int l = L - 1; l >= 0; l--) {
        LayerActs x = gpt2_layer_acts(model, l);
        // dresidual holds d(residual3[l]) here
        matmul_backward(a.dbuf_4c, g.fcprojw + (size_t)l * C * 4 * C, g.fcprojb + l * C, a.dresidual, x.fch_gelu,
                        p.fcprojw + (size_t)l * C * 4 * C, BT, 4 * C, C, gpt2_bf16(model, lp, LIN_FCPROJ, l));
        PROF(PROF_GELU, gelu_backward(a.dbuf_4c, g.fcb + l * 4 * C, x.fch, BT, 4 * C, gpt2_bf16(model, lp, LIN_FC, l)));
        matmul_backward(a.dbuf_c, g.fcw + (size_t)l * 4 * C * C, g.fcb + l * 4 * C, a.dbuf_4c, x.ln2,
                        p.fcw + (size_t)l * 4 * C * C, BT, C, 4 * C, gpt2_bf16(model, lp, LIN_FC, l));
        PROF(PROF_LAYERNORM, layernorm_backward(a.dresidual, g.ln2w + l * C, g.ln2b + l * C, a.dbuf_c, x.residual2,
                                                p.ln2w + l * C, x.ln2_mean, x.ln2_rstd, BT, C));
        // dresidual holds d(residual2[l]) here
        matmul_backward(a.dbuf_c, g.attprojw + (size_t)l * C * C, g.attprojb + l * C, a.dresidual, x.atty,
                        p.attprojw + (size_t)l * C * C, BT, C, C, gpt2_bf16(model, lp, LIN_ATTPROJ, l));
        float* dqkv = a.dbuf_4c;  // (B, T, 3C); in bf16 bf16_b holds it rounded, qkvb's gradient done
        PROF(PROF_ATTENTION, attention_backward(dqkv, g.qkvb + l * 3 * C, a.att_scratch, a.dbuf_c, x.qkv, x.att, B, T,
                                                C, NH, gpt2_bf16(model, lp, BF16_ATTENTION, l)));
        matmul_backward(a.dbuf_c, g.qkvw + (size_t)l * 3 * C * C, g.qkvb + l * 3 * C, dqkv, x.ln1,
                        p.qkvw + (size_t)l * 3 * C * C, BT, C, 3 * C, gpt2_bf16(model, lp, LIN_QKV, l));
        PROF(PROF_LAYERNORM, layernorm_backward(a.dresidual, g.ln1w + l * C, g.ln1b + l * C, a.dbuf_c, x.residual,
                                                p.ln1w + l * C, x.ln1_mean, x.ln1_rstd, BT, C));
    }
    PROF(PROF_ENCODER, encoder_backward(g.wte, g.wpe, a.dresidual, inputs, B, T, C));
}

// global L2 norm of the gradients: fixed chunks summed in double, chunk sums added in order,
// so the result does not depend on thread timing
#define NORM_CHUNKS 64
float gpt2_grad_norm(GPT2* model) {
    double partial[NORM_CHUNKS];
    size_t n = model->num_parameters;
    const float* g = model->grads_memory;
    #pragma omp parallel for schedule(static)
    for (int k = 0; k < NORM_CHUNKS; k++) {
        size_t i0 = n * k / NORM_CHUNKS, i1 = n * (k + 1) / NORM_CHUNKS;
        double acc = 0.0;
        #pragma omp simd reduction(+:acc)
        for (size_t i = i0; i < i1; i++) { acc += (double)g[i] * g[i]; }
        partial[k] = acc;
    }
    double total = 0.0;
    for (int k = 0; k < NORM_CHUNKS; k++) { total += partial[k]; }
    return (float)sqrt(total);
}

// AdamW step t (1-based) on every parameter with gradient grads * grad_scale (grad_scale < 1 clips).
// Decoupled weight decay on the 2-D weights only (PARAM_DECAYS). The gradients are left zero: each is set to
// 0 where it is read, so the next step's backward accumulates into zeros without a pass of its own (that
// pass read and wrote every gradient again; this one writes lines the update has in cache already).
// With an EMA of the weights (model->average), the same pass folds each new weight into it (llmc/average.h).
// one loop per combination of the EMA and the bf16 copy (AFTER: what follows each new weight), each a
// constant of its loop: a conditional 16-bit store kept the whole loop scalar on CPUs without AVX-512
#define UPDATE_LOOP(AFTER)                                                                                     \
    _Pragma("omp parallel for simd schedule(static)")                                                          \
    for (size_t i = 0; i < n; i++) {                                                                           \
        p[i] = adamw_element(p[i], g[i] * grad_scale, &m[i], &v[i], lr, beta1, beta2, bc1, bc2, eps, wd);       \
        AFTER                                                                                                  \
        g[i] = 0.0f;                                                                                           \
    }
void gpt2_update(GPT2* model, float lr, float beta1, float beta2, float eps, float weight_decay,
                 float grad_scale, int t) {
    if (model->m_memory == NULL) { fatal("model: gpt2_update before gpt2_allocate"); }
    float bc1 = 1.0f - powf(beta1, (float)t);
    float bc2 = 1.0f - powf(beta2, (float)t);
    WeightAverage* avg = model->average;
    int ema = average_on(avg) && avg->ema_decay > 0.0f;
    if (ema && avg->swapped) { fatal("model: gpt2_update with the kept weights swapped in"); }
    float ew = 0.0f, ek = 0.0f;  // the EMA's weights of the new weights and of the average
    if (ema) { average_ema_coefs(avg->ema_decay, t, &ew, &ek); }
    size_t offset = 0;
    for (int k = 0; k < NUM_PARAMETER_TENSORS; k++) {
        float wd = PARAM_DECAYS[k] ? weight_decay : 0.0f;
        float* p = model->params_memory + offset;
        float* g = model->grads_memory + offset;
        float* m = model->m_memory + offset;
        float* v = model->v_memory + offset;
        size_t n = model->param_sizes[k];
        float* e = ema ? avg->weights + offset : NULL;
        bf16* p16 = model->params_bf16 != NULL ? model->params_bf16 + offset : NULL;
        if (e != NULL && p16 != NULL) { UPDATE_LOOP(e[i] = average_ema_element(e[i], p[i], ew, ek); p16[i] = bf16_from_float(p[i]);) }
        else if (e != NULL) { UPDATE_LOOP(e[i] = average_ema_element(e[i], p[i], ew, ek);) }
        else if (p16 != NULL) { UPDATE_LOOP(p16[i] = bf16_from_float(p[i]);) }
        else { UPDATE_LOOP() }
        offset += n;
    }
    gpt2_bf16_updated(model);
}

void gpt2_free(GPT2* model) {
    free(model->params_memory);
    free(model->grads_memory);
    free(model->m_memory);
    free(model->v_memory);
    free(model->acts_memory);
    free(model->params_bf16);
    free(model->bf16_a);
    free(model->bf16_b);
    free(model->bf16_b_packed);
    free(model->ce_scratch);
    model->ce_scratch = NULL;
    for (int i = 0; i < NUM_LINEARS; i++) { bf16_linear_destroy(&model->lin[i]); }
    bf16_attention_destroy(&model->att16);
    model->params_bf16 = NULL;
    model->bf16_a = model->bf16_b = NULL;
    model->bf16_b_packed = NULL;
    model->bf16 = 0;
    model->params_memory = model->grads_memory = model->m_memory = model->v_memory = model->acts_memory = NULL;
}

// --precision auto measures: a step's linear products at this model's shapes in fp32 (the layer calls above)
// and in bf16 (primitives made as gpt2_set_precision makes the model's; forms, packing and chunks alike): each
// layer's forward, dinp and dweight on PROBE_ROWS of the step's B*T rows (all where fewer), the lm head on one
// chunk of W's rows; each scaled to the step (rows, layers, chunks). Most of a step's FLOPs; the attention's
// products are not in it (at T = 256 about 5%). fp32 and bf16 take turns, so a change in the machine's load
// falls on both, and each keeps its best of PROBE_SWEEPS (the first pays for first touches; no more sweeps
// past PROBE_BUDGET_S seconds: on a large model one sweep).
#define PROBE_ROWS 256
#define PROBE_SWEEPS 4
#define PROBE_BUDGET_S 1.0
typedef struct {
    double ms[2];     // a step's linear products, fp32 [0] and bf16 [1], in ms
    double seconds;   // the probe's own time
    int measured;
} PrecisionProbe;

PrecisionProbe precision_probe(const GPT2Config* c, int B, int T) {
    double start = clock_seconds();
    int C = c->channels, L = c->num_layers, Vp = c->padded_vocab_size, N = B * T;
    int R = N < PROBE_ROWS ? N : PROBE_ROWS, lmw = Vp < BF16_CHUNK ? Vp : BF16_CHUNK, wide = lmw > 4 * C ? lmw : 4 * C;
    int in[NUM_LINEARS] = {C, C, C, 4 * C, C}, out[NUM_LINEARS] = {3 * C, C, 4 * C, C, lmw};
    int form[NUM_LINEARS] = {DNNL_C_BIAS | DNNL_C_BF16, DNNL_C_ADD, DNNL_C_BIAS, DNNL_C_ADD, DNNL_C_SET};
    double per_step[NUM_LINEARS] = {L, L, L, L, (double)Vp / lmw};  // how many of each a step runs
    size_t act = (size_t)R * wide, w = (size_t)wide * C;
    float* f = (float*)mallocCheck((5 * act + 2 * w + 2 * wide) * sizeof(float));
    float *inp = f, *res = inp + act, *o = res + act, *dinp = o + act, *wt = dinp + act, *dw = wt + w, *bias = dw + w;
    float* dbias = bias + wide;
    bf16* h = (bf16*)mallocCheck((3 * act + w) * sizeof(bf16));
    bf16 *inp16 = h, *out16 = inp16 + act, *dout16 = out16 + act, *w16 = dout16 + act;
    for (size_t i = 0; i < 5 * act + 2 * w + 2 * wide; i++) { f[i] = 0.01f * (float)((int)(i % 13) - 6); }
    for (size_t i = 0; i < act; i++) { inp16[i] = dout16[i] = bf16_from_float(inp[i]); }
    for (size_t i = 0; i < w; i++) { w16[i] = bf16_from_float(wt[i]); }
    Bf16Linear lin[NUM_LINEARS];
    size_t packed_bytes = 64;
    for (int k = 0; k < NUM_LINEARS; k++) {
        int pack = k == LIN_LM ? !dnnl_isa_amx() : N >= 4096;  // as gpt2_set_precision packs
        bf16_linear_create(&lin[k], R, in[k], out[k], form[k], w16, 1, pack, BF16_CHUNK);
        bf16_linear_pack(&lin[k]);
        packed_bytes = bf16_linear_act_bytes(&lin[k]) > packed_bytes ? bf16_linear_act_bytes(&lin[k]) : packed_bytes;
    }
    void* packed = aligned_alloc(64, packed_bytes);
    if (packed == NULL) { fatal("--precision auto: out of memory for the probe"); }
    Bf16Op fp32 = {0};
    PrecisionProbe p = {{INFINITY, INFINITY}, 0.0, 1};
    for (int sweep = 0; sweep < PROBE_SWEEPS && (sweep == 0 || clock_seconds() - start < PROBE_BUDGET_S); sweep++) {
        for (int turn = 0; turn < 2; turn++) {
            int bf = turn ^ (sweep & 1);  // fp32 first, then bf16 first, ...
            double ms = 0.0;
            for (int k = 0; k < NUM_LINEARS; k++) {
                const float* b = k == LIN_LM ? NULL : bias;
                const float* r = form[k] == DNNL_C_ADD ? res : NULL;
                double t0 = clock_seconds();
                if (bf) {  // as the step runs them: qkv and the lm head write bf16; the dout of qkv, fc and the lm head is bf16
                    int keeps16 = k == LIN_QKV || k == LIN_LM, ready = keeps16 || k == LIN_FC;
                    matmul_forward_bf16(o, keeps16 ? out16 : NULL, inp16, &lin[k], 0, b, r, R, in[k], out[k]);
                    matmul_backward_bf16(dinp, dw, ready ? NULL : dbias, ready ? NULL : o, inp16, &lin[k], 0, R, in[k],
                                         out[k], dout16, packed);
                } else {
                    matmul_forward(o, inp, wt, b, r, R, in[k], out[k], fp32);
                    matmul_backward(dinp, dw, k == LIN_LM ? NULL : dbias, o, inp, wt, R, in[k], out[k], fp32);
                }
                ms += (clock_seconds() - t0) * 1000.0 * per_step[k] * N / R;
            }
            if (ms < p.ms[bf]) { p.ms[bf] = ms; }
        }
    }
    for (int k = 0; k < NUM_LINEARS; k++) { bf16_linear_destroy(&lin[k]); }
    free(packed);
    free(h);
    free(f);
    p.seconds = clock_seconds() - start;
    return p;
}

#ifndef TESTING
// ----------------------------------------------------------------------------
// the trainer: the run (llmc/run.h: flags, data, schedule, sampler, logs, counters), the model and
// hybrid mode's state

// MFU reference: OpenBLAS SGEMM (2048^3, fp32) per core on the development machine. `make bench` measures
// the real peak next to the trainer.
#define CPU_PEAK_GFLOPS_PER_THREAD 145.0
// bf16's: oneDNN's bf16 matmul 2048^3 per core on the fastest bf16 CPU at hand (a nominal peak below a
// CPU's real one prints an MFU above 100%); `make bench` measures the machine's own (build/bench_sgemm
// 2048 5 bf16)
#define CPU_BF16_PEAK_GFLOPS_PER_THREAD 320.0
// --precision's value for this run, with the reason, for the start-up table; exits with one line when
// bf16 is asked for and cannot be had. auto: fp32 where the CPU has no native bf16 or the build no oneDNN;
// elsewhere the faster of the two at this model's shapes, measured (precision_probe): a CPU that lists
// avx512_bf16 may still multiply bf16 slower than OpenBLAS multiplies fp32 (docs/benchmark.md). A resumed
// run keeps the precision its checkpoint recorded; the test reference (LLMC_BF16_TEST_REFERENCE) is bf16, as
// is text alone (-x 0: nothing to measure), and LLMC_PRECISION_TEST_PROBE=fp32|bf16 (test-only) forces the
// probe's answer without measuring. fp32
// stays the reference: the PyTorch and gradient checks run in it.
static int resolve_precision(int flag, const char* recorded, const GPT2* model, int B, int T, int training,
                             PrecisionProbe* probe, char* why, size_t size) {
    int native = cpu_has_native_bf16();
    memset(probe, 0, sizeof(*probe));
    if (flag == PRECISION_BF16) {
        if (!dnnl_available()) { fatal("flag --precision bf16: this build has no oneDNN (install libdnnl-dev and rebuild)"); }
        if (!native) { fatal("flag --precision bf16: this CPU has no native bf16 dot products (avx512_bf16 or AMX)"); }
        snprintf(why, size, "bf16 (asked; oneDNN on %s)", dnnl_isa_name());
        return PRECISION_BF16;
    }
    if (flag == PRECISION_FP32) { snprintf(why, size, "fp32 (asked)"); return PRECISION_FP32; }
    if (recorded != NULL && strcmp(recorded, "bf16") == 0 && (!native || !dnnl_available())) {
        fatal("flag --precision auto: the checkpoint's run is bf16, which this %s cannot run (resume with "
              "--precision fp32 --allow-changed 1)", native ? "build" : "CPU");
    }
    if (recorded != NULL && (strcmp(recorded, "bf16") == 0 || strcmp(recorded, "fp32") == 0)) {
        snprintf(why, size, "%s (auto: as the checkpoint's run)", recorded);
        return recorded[0] == 'b' ? PRECISION_BF16 : PRECISION_FP32;
    }
    if (!native) { snprintf(why, size, "fp32 (auto: the CPU has no native bf16)"); return PRECISION_FP32; }
    if (!dnnl_available()) { snprintf(why, size, "fp32 (auto: built without oneDNN)"); return PRECISION_FP32; }
    if (bf16_test_reference()) { snprintf(why, size, "bf16 (auto: the test reference)"); return PRECISION_BF16; }
    if (!training) { snprintf(why, size, "bf16 (auto: native bf16; -x 0, nothing measured)"); return PRECISION_BF16; }
    const char* forced = getenv("LLMC_PRECISION_TEST_PROBE");
    if (forced != NULL && strcmp(forced, "fp32") != 0 && strcmp(forced, "bf16") != 0) {
        fatal("LLMC_PRECISION_TEST_PROBE: '%s' is not fp32 or bf16", forced);
    }
    if (forced != NULL) {
        snprintf(why, size, "%s (auto: LLMC_PRECISION_TEST_PROBE)", forced);
        return forced[0] == 'b' ? PRECISION_BF16 : PRECISION_FP32;
    }
    *probe = precision_probe(&model->config, B, T);
    int bf16 = probe->ms[1] < probe->ms[0];
    snprintf(why, size, "%s (auto: the faster; oneDNN on %s)", bf16 ? "bf16" : "fp32", dnnl_isa_name());
    return bf16 ? PRECISION_BF16 : PRECISION_FP32;
}

typedef struct {
    TrainRun run;
    GPT2 model;
    HybridState hybrid;       // hybrid mode (hybrid/hybrid.h); zeroed without --hybrid
    WeightAverage avg;        // the weights to evaluate and keep where they are not the trained ones (--ema, or
                              // a hybrid method's: GPA's average)
    int grads_zero;           // the last step's update left the gradients zero, and nothing wrote them since
    KVCache kv;               // the samples' keys and values, -t positions (with -g > 0)
} Trainer;

static const ArgSpec CPU_ARGS[] = {
    {"--precision", ARG_CHOICE, offsetof(TrainConfig, precision), 0, 0, 0,
     "the matmuls' operands: bf16 (oneDNN, fp32 accumulation) or fp32; auto: see the start-up table",
     "auto|fp32|bf16", NULL, 1},
};

static const ArgTable CPU_TABLE = {CPU_ARGS, 1, NULL, NULL, 0, NULL, 0, NULL, NULL};
static const ArgTable* const CPU_TABLES[] = {&CPU_TABLE, HYBRID_ARG_TABLES};  // hybrid/: --hybrid's and each method's

static const TrainCli CLI = {
    "./train_gpt2", "GPT-2 training on the CPU, fp32 or bf16 matmuls", CPU_TABLES, (int)(sizeof(CPU_TABLES) / sizeof(CPU_TABLES[0])),
    "Example: ./train_gpt2 -e d6 -b 8 -t 256 -x 50 -o out/d6\n"
    "Text from a model file: ./train_gpt2 -e out/d6/model_00000050.bin -x 0 --prompt \"And God said\" -g 200\n",
};

// one measured step (a Full step, or in hybrid mode a Correct step at the predicted point): forward and
// backward over grad_accum micro batches, global norm, clip, AdamW. A non-finite loss or norm never
// reaches the weights: the update is skipped. The gradients start from zero: the update (gpt2_update,
// hybrid_update) leaves them so, and after anything else (a skipped update, hybrid mode's keep buffer) they
// are zeroed here.
// Hybrid mode: the first micro batch's loss goes to hybrid_check, which may roll a Predict run back while
// the gradient buffer still holds the weights from before it (so a Correct step zeroes the gradients only
// after that); the update is AdamW fused with the drift and the look-ahead, one pass.
static StepResult train_full_step(Trainer* tr, const HybridPlan* plan, float lr) {
    StepResult r = {0};
    r.grad_norm_micro1 = r.loss_micro1 = NAN;
    double t0 = clock_seconds();
    GPT2* model = &tr->model;
    DataLoader* loader = &tr->run.train_loader;
    int B = tr->run.cfg.B, T = tr->run.cfg.T;
    int correct = plan->phase == HYBRID_PHASE_CORRECT;
    if (!correct && !tr->grads_zero) { gpt2_zero_grad(model); }
    tr->grads_zero = 0;
    double loss_sum = 0.0;
    for (int k = 0; k < tr->run.grad_accum; k++) {
        if (!tr->run.cfg.overfit) { dataloader_next_batch(loader); }
        float dloss_scale = 1.0f / tr->run.grad_accum;
        gpt2_forward_train(model, loader->inputs, loader->targets, B, T, dloss_scale);
        if (k == 0 && plan->observe) { r.loss_micro1 = model->mean_loss; }
        if (k == 0 && plan->check && hybrid_check(&tr->hybrid, model->mean_loss)) {
            apply_rollback(model->params_memory, model->grads_memory, model->num_parameters);
            model->bf16_fresh = 0;
            gpt2_forward_train(model, loader->inputs, loader->targets, B, T, dloss_scale);
        }
        if (k == 0 && correct) { gpt2_zero_grad(model); }
        gpt2_backward(model, loader->inputs, loader->targets, dloss_scale);
        loss_sum += model->mean_loss;
        // the first micro batch's gradient alone, for the gradient noise scale (llmc/run.h)
        if (k == 0 && tr->run.grad_accum > 1) { r.grad_norm_micro1 = gpt2_grad_norm(model) * tr->run.grad_accum; }
    }
    r.loss = (float)(loss_sum / tr->run.grad_accum);
    r.grad_norm = gpt2_grad_norm(model);
    int hybrid = hybrid_enabled(&tr->hybrid);
    if (!isfinite(r.loss) || !isfinite(r.grad_norm)) {
        r.skipped = 1;
        if (hybrid) { hybrid_skip_update(&tr->hybrid); }
    } else {
        float grad_scale = r.grad_norm > tr->run.cfg.grad_clip ? tr->run.cfg.grad_clip / r.grad_norm : 1.0f;
        tr->run.adam_steps++;
        if (hybrid) {
            hybrid_update(&tr->hybrid, model->params_memory, model->grads_memory, model->m_memory, model->v_memory,
                          grad_scale, tr->run.adam_steps);
            gpt2_bf16_updated(model);  // the fused pass rounded the bf16 copy too
        } else {
            gpt2_update(model, lr, tr->run.cfg.beta1, tr->run.cfg.beta2, ADAM_EPS, tr->run.cfg.weight_decay, grad_scale, tr->run.adam_steps);
        }
        tr->grads_zero = 1;  // either update left them zero
    }
    tr->run.tokens += (uint64_t)tr->run.grad_accum * B * T;
    tr->run.backward += (uint64_t)tr->run.grad_accum;
    r.ms = (clock_seconds() - t0) * 1000.0;
    tr->run.train_time_s += r.ms / 1000.0;
    return r;
}

// one Predict step (hybrid mode): one step along the drift, written in place; no forward, no backward, no
// batch. The run's first step keeps the weights in the gradient buffer (idle until the Correct step's
// backward) for an exact rollback.
static StepResult train_predict_step(Trainer* tr, const HybridPlan* plan) {
    StepResult r = {0};
    double t0 = clock_seconds();
    hybrid_apply_predict(&tr->hybrid, plan, tr->model.params_memory, tr->model.grads_memory);
    tr->model.bf16_fresh = 0;
    tr->grads_zero = 0;  // a run's first step keeps the weights there
    r.loss = r.grad_norm = r.grad_norm_micro1 = r.loss_micro1 = NAN;
    r.ms = (clock_seconds() - t0) * 1000.0;
    tr->run.train_time_s += r.ms / 1000.0;
    return r;
}


// ----------------------------------------------------------------------------
// evaluation, text, checkpoints: val loss at the trained weights and at the kept ones; samples and the model
// file at the kept ones

// the parameters hold the weights to evaluate and keep (in = 1) or the trained ones (in = 0): an exact swap
// with the set kept apart (llmc/average.h), where the run keeps one; the bf16 copy is rounded again from
// whichever the parameters hold at the next forward
static void use_kept_weights(Trainer* tr, int in) {
    if (!average_on(&tr->avg) || tr->avg.swapped == in) { return; }
    average_swap(&tr->avg, tr->model.params_memory);
    tr->model.bf16_fresh = 0;
}

// mean val loss over the run's val batches (the same batches every time)
static float evaluate(Trainer* tr) {
    DataLoader* val = &tr->run.val_loader;
    size_t n = run_val_begin(&tr->run);
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) {
        dataloader_next_batch(val);
        gpt2_forward(&tr->model, val->inputs, val->targets, tr->run.cfg.B, tr->run.cfg.T);
        sum += tr->model.mean_loss;
    }
    return (float)(sum / n);
}

// val loss at the kept weights; NAN where the run keeps none apart, or before its first update (they are the
// trained ones then)
static float evaluate_kept(Trainer* tr) {
    if (!average_on(&tr->avg) || tr->run.adam_steps == 0) { return NAN; }
    use_kept_weights(tr, 1);
    float loss = evaluate(tr);
    use_kept_weights(tr, 0);
    return loss;
}

// the prompt, then -g tokens. While the context fits in T, each token is one new position through the KV
// cache (fp32); past T the window slides, every position moves, and each token is a forward over the last
// T tokens at (1, T) on the same arena, as in llm.c
static void generate(Trainer* tr) {
    GPT2* model = &tr->model;
    Sampler* s = &tr->run.sampler;
    int V = model->config.vocab_size, Vp = model->config.padded_vocab_size, T = tr->run.cfg.T;
    use_kept_weights(tr, 1);
    sampler_begin(s, &tr->run.tokenizer);
    kvcache_reset(&tr->kv);
    for (int t = s->prompt_len; t < s->end; t++) {
        const float* logits = NULL;
        if (t <= T) {
            while (tr->kv.pos < t) { logits = kvcache_forward(&tr->kv, model->params_memory, s->tokens[tr->kv.pos]); }
        } else {
            gpt2_forward(model, s->tokens + (t - T), NULL, 1, T);
            logits = model->acts.logits + (size_t)(T - 1) * Vp;
        }
        sampler_push(s, t, logits, V, &tr->run.tokenizer);
    }
    sampler_end();
    use_kept_weights(tr, 0);
}

// model, state and (hybrid mode) hybrid state of this step, then the DONE marker; the gradient buffer
// holds the rollback point of an open Predict run. The model file holds the weights to keep; where those
// are not the trained ones, the state carries the trained ones (swapped out of the parameters meanwhile).
static void checkpoint(Trainer* tr) {
    char path[4096];
    checkpoint_path(path, sizeof(path), tr->run.cfg.output_dir, "model", tr->run.step);
    use_kept_weights(tr, 1);
    model_write(path, &tr->model.config, tr->model.params_memory, tr->model.num_parameters);
    run_state_write(&tr->run, tr->model.num_parameters, tr->model.m_memory, tr->model.v_memory,
                    average_on(&tr->avg) ? tr->avg.weights : NULL);
    use_kept_weights(tr, 0);
    if (hybrid_enabled(&tr->hybrid)) { hybrid_checkpoint_write(&tr->hybrid, &tr->run, NULL, tr->model.grads_memory); }
    run_state_commit(&tr->run);
}

int main(int argc, char** argv) {
    cpu_blas_init(argc, argv);  // the OpenBLAS kernel and the OpenMP wait policy (may re-execute once)
    static Trainer tr;
    TrainRun* run = &tr.run;
    TrainConfig* cfg = &run->cfg;
    config_parse(cfg, argc, argv, &CLI);
    run->cli = &CLI;
    run->num_processes = 1;
    run->rank0 = 1;
    if (cfg->output_dir != NULL) { config_make_dirs(cfg->output_dir); }

    // the model: from the latest checkpoint when resuming, else from -e
    int resume_step = run_state_resume_step(run);
    char path[4096];
    int depth;
    if (run_state_model_source(cfg, resume_step, path, sizeof(path), &depth)) {
        gpt2_build_from_checkpoint(&tr.model, path);
    } else {
        gpt2_build_from_random(&tr.model, depth, shard_vocab_size(cfg->train_pattern), (uint64_t)cfg->seed);
    }
    if (cfg->T > tr.model.config.max_seq_len) {
        fatal("flag -t: sequence length %d exceeds the model's maximum %d", cfg->T, tr.model.config.max_seq_len);
    }
    gpt2_allocate(&tr.model, cfg->B, cfg->T);
    const GPT2Config* mc = &tr.model.config;
    char precision_why[128], recorded[16];
    int kept = resume_step >= 0 && run_state_recorded(run, resume_step, "--precision", recorded, sizeof(recorded));
    PrecisionProbe probe;
    cfg->precision = resolve_precision(cfg->precision, kept ? recorded : NULL, &tr.model, cfg->B, cfg->T,
                                       cfg->max_steps != 0, &probe, precision_why, sizeof(precision_why));
    gpt2_set_precision(&tr.model, cfg->precision == PRECISION_BF16);
    if (cfg->sample_tokens > 0) { kvcache_init(&tr.kv, mc, cfg->T); }

    // data, schedule, sampler, logs; -x 0: text from the model, no training
    if (cfg->max_steps == 0 && (cfg->ema > 0.0f || hybrid_flags.enabled)) {  // nothing trains to average or predict
        fatal("flag %s: -x 0 only writes text from the model", cfg->ema > 0.0f ? "--ema" : "--hybrid");
    }
    run_setup(run, mc->vocab_size, resume_step);
    run_resolve_beta2(run, resume_step);  // --beta2 -1: by the tokens per step, or the checkpoint's
    if (cfg->max_steps == 0) {
        generate(&tr);
        kvcache_free(&tr.kv);
        run_free(run);
        gpt2_free(&tr.model);
        return EXIT_SUCCESS;
    }
    hybrid_setup(&tr.hybrid, &hybrid_flags, run, mc, ADAM_EPS, tr.model.params_memory, 1);
    hybrid_set_bf16_copy(&tr.hybrid, tr.model.params_bf16);
    if (hybrid_kept_weights(&tr.hybrid) != NULL) {  // a method that keeps its own weights to evaluate (GPA's x)
        tr.avg.weights = hybrid_kept_weights(&tr.hybrid);
        tr.avg.n = tr.model.num_parameters;
        tr.avg.label = tr.hybrid.method->name;
        run->kept_label = tr.avg.label;
    }
    if (cfg->ema > 0.0f) {  // the EMA: one buffer, a copy of the weights until the first update folds in
        average_init_ema(&tr.avg, tr.model.params_memory, tr.model.num_parameters, cfg->ema);
        tr.model.average = &tr.avg;
        hybrid_set_ema(&tr.hybrid, tr.avg.weights, cfg->ema);  // the method's update folds it (or refuses it)
        run->kept_label = tr.avg.label;
    }
    if (resume_step >= 0) {  // counters, AdamW state, data position (and hybrid state) of the checkpoint
        run_state_load(run, resume_step, tr.model.num_parameters, tr.model.m_memory, tr.model.v_memory,
                       average_on(&tr.avg) ? tr.avg.weights : NULL);
        // with an average, the model file held the kept weights and the state the trained ones: swap them
        tr.avg.swapped = average_on(&tr.avg);
        use_kept_weights(&tr, 0);
        if (hybrid_enabled(&tr.hybrid)) { hybrid_checkpoint_load(&tr.hybrid, run, resume_step, NULL, tr.model.grads_memory); }
    }
    if (cfg->overfit) {  // the same first batch on every step, also after a resume
        dataloader_reset(&run->train_loader, (uint64_t)cfg->seed);
        dataloader_next_batch(&run->train_loader);
    }
    run->flops_per_token = 6.0 * tr.model.num_parameters + 6.0 * mc->num_layers * mc->channels * cfg->T;
    double peak_per_thread = tr.model.bf16 ? CPU_BF16_PEAK_GFLOPS_PER_THREAD : CPU_PEAK_GFLOPS_PER_THREAD;
    run->peak_flops = peak_per_thread * 1e9 * omp_get_max_threads();
    report_config_begin(run, &CLI, mc, tr.model.num_parameters);
    char v[64];
    report_row("precision", precision_why);
    if (probe.measured) {
        snprintf(v, sizeof(v), "fp32 %.1f, bf16 %.1f ms/step (probe %.2f s)", probe.ms[0], probe.ms[1], probe.seconds);
        report_row("auto: products", v);  // a step's linear products in each precision, measured
    }
    report_row("BLAS", cpu_blas_describe());
    snprintf(v, sizeof(v), "%d", omp_get_max_threads()); report_row("threads", v);
    snprintf(v, sizeof(v), "%.0f", peak_per_thread * omp_get_max_threads()); report_row("MFU peak GFLOP/s", v);
    snprintf(v, sizeof(v), "%.1f", tr.model.num_activations * 4.0 / 1048576.0); report_row("activation MiB", v);
    report_config_end(resume_step);

    // the training loop: each step is a Full step (forward, backward, AdamW) or, in hybrid mode, what
    // hybrid/ plans: a Predict step (along the drift: no batch, no backward) or a Correct step (a Full
    // step taken at the predicted point, which may roll the Predict run back)
    signals_install();
    if (run->has_val && run->step == 0) { run_log_init_val(run, evaluate(&tr)); }
    while (run->step < run->total_steps) {
        float lr = lr_scheduler_get(&run->scheduler, run->step);
        HybridPlan plan = hybrid_plan(&tr.hybrid, run->step, lr);  // a Full step, or hybrid mode's Predict or Correct
        StepResult r = plan.phase == HYBRID_PHASE_PREDICT ? train_predict_step(&tr, &plan) : train_full_step(&tr, &plan, lr);
        hybrid_report(&tr.hybrid, run, &r);                        // all of hybrid/'s bookkeeping happens in there
        run_step_end(run, &r);
        run_print_step(run, &r, lr);
        int val = run_val_due(run);
        float val_loss = val ? evaluate(&tr) : NAN;
        run_log_step(run, &r, lr, val_loss, val ? evaluate_kept(&tr) : NAN);  // at the trained and kept weights
        if (run_sample_due(run)) { generate(&tr); }
        int stop = signals_stop_requested();
        if (run_checkpoint_due(run, stop)) { checkpoint(&tr); }
        if (stop && !run_last_step(run)) {
            signals_print_resume_hint(run->step, cfg->output_dir, argc, argv);
            break;
        }
    }
    // the precision and auto's measurement (ms of a step's products) where it took one, then hybrid's pairs
    char extra[3072];
    char probe_ms[64] = "null";
    if (probe.measured) { snprintf(probe_ms, sizeof(probe_ms), "{\"fp32\": %.3f, \"bf16\": %.3f}", probe.ms[0], probe.ms[1]); }
    snprintf(extra, sizeof(extra), ", \"precision\": \"%s\", \"precision_probe_ms\": %s", tr.model.bf16 ? "bf16" : "fp32",
             probe_ms);
    if (!hybrid_summary(&tr.hybrid, run, extra, sizeof(extra))) {
        fprintf(stderr, "warning: summary.json: hybrid's fields did not all fit in %zu bytes; written without the rest\n",
                sizeof(extra));
    }
    report_summary(run, extra);

    if (hybrid_kept_weights(&tr.hybrid) == NULL) { average_free(&tr.avg); }  // else hybrid/'s buffer
    kvcache_free(&tr.kv);
    hybrid_free(&tr.hybrid);
    run_free(run);
    gpt2_free(&tr.model);
    return EXIT_SUCCESS;
}
#endif // TESTING

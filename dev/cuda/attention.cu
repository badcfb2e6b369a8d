// dev/cuda/attention.cu — flash-style causal attention (forward, backward) vs the CPU path's attention,
// which materialises the (B,NH,T,T) probabilities; then a timing sweep over T.
// For head sizes 64 and 128 and several T (multiples of the 64-row tile and not), every implementation
// is checked against the CPU loop: the CUDA-core kernels (attention_*_cc, the reference), the tensor-core
// kernels (attention_*_tc, bf16 builds; also against the CUDA-core ones, and their backward must repeat
// bit for bit), and in a cuDNN build (the Makefile found cuDNN, bf16, USE_CUDNN not 0) the cuDNN path
// (llmc/cudnn_att.cpp) against the CPU loop and the CUDA-core kernels (its backward must repeat too).
// Tolerances (|x - ref| <= atol + rtol |ref| everywhere): outputs DEV_ATOL/DEV_RTOL (bf16: 2e-2, fp32:
// 1e-4), dqkv twice that; the fp32 log-sum-exp within 1e-3 + 1e-3 relative of the CUDA-core kernels'.
// Exit status 1 if any check fails (a cuDNN build without an engine for the graphs fails too).
// make dev/cuda/attention && ./dev/cuda/attention
#include <string.h>
#include "dev/cuda/dev_common.cuh"
#include "llmc/attention.cuh"
#ifdef ENABLE_CUDNN
#include "llmc/cudnn_att.h"
#endif

// as train_gpt2.c: preatt = q.k * scale (causal), att = softmax, out = att @ v; keeps att for the backward
static void attention_forward_cpu(float* out, float* att, const float* qkv, int B, int T, int C, int NH) {
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; b < B; b++) for (int h = 0; h < NH; h++) for (int t = 0; t < T; t++) {
        const float* q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
        float* a = att + (((size_t)b * NH + h) * T + t) * T;
        float maxv = -INFINITY;
        for (int t2 = 0; t2 <= t; t2++) {
            const float* k = qkv + ((size_t)b * T + t2) * 3 * C + C + h * hs;
            float s = 0.0f;
            for (int d = 0; d < hs; d++) { s += q[d] * k[d]; }
            a[t2] = s * scale;
            if (a[t2] > maxv) { maxv = a[t2]; }
        }
        float sum = 0.0f;
        for (int t2 = 0; t2 <= t; t2++) { a[t2] = expf(a[t2] - maxv); sum += a[t2]; }
        for (int t2 = 0; t2 < T; t2++) { a[t2] = t2 <= t ? a[t2] / sum : 0.0f; }
        float* o = out + ((size_t)b * T + t) * C + h * hs;
        for (int d = 0; d < hs; d++) { o[d] = 0.0f; }
        for (int t2 = 0; t2 <= t; t2++) {
            const float* v = qkv + ((size_t)b * T + t2) * 3 * C + 2 * C + h * hs;
            for (int d = 0; d < hs; d++) { o[d] += a[t2] * v[d]; }
        }
    }
}

static void attention_backward_cpu(float* dqkv, const float* dout, const float* qkv, const float* att,
                                   int B, int T, int C, int NH) {
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    float* datt = (float*)mallocCheck((size_t)T * sizeof(float));
    for (int b = 0; b < B; b++) for (int h = 0; h < NH; h++) for (int t = 0; t < T; t++) {
        const float* a = att + (((size_t)b * NH + h) * T + t) * T;
        const float* dy = dout + ((size_t)b * T + t) * C + h * hs;
        const float* q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
        float* dq = dqkv + ((size_t)b * T + t) * 3 * C + h * hs;
        for (int t2 = 0; t2 <= t; t2++) {
            const float* v = qkv + ((size_t)b * T + t2) * 3 * C + 2 * C + h * hs;
            float* dv = dqkv + ((size_t)b * T + t2) * 3 * C + 2 * C + h * hs;
            datt[t2] = 0.0f;
            for (int d = 0; d < hs; d++) { datt[t2] += v[d] * dy[d]; dv[d] += a[t2] * dy[d]; }
        }
        for (int t2 = 0; t2 <= t; t2++) {
            float dpre = 0.0f;  // softmax backward: a * (datt - sum_k a_k datt_k)
            for (int t3 = 0; t3 <= t; t3++) { dpre += a[t3] * ((t2 == t3 ? 1.0f : 0.0f) - a[t2]) * datt[t3]; }
            const float* k = qkv + ((size_t)b * T + t2) * 3 * C + C + h * hs;
            float* dk = dqkv + ((size_t)b * T + t2) * 3 * C + C + h * hs;
            for (int d = 0; d < hs; d++) { dq[d] += k[d] * dpre * scale; dk[d] += q[d] * dpre * scale; }
        }
    }
    free(datt);
}

typedef void (*fwd_fn)(floatX*, float*, const floatX*, int, int, int, int, cudaStream_t);
typedef void (*bwd_fn)(floatX*, float*, const floatX*, const floatX*, const floatX*, const float*, int, int, int,
                       int, cudaStream_t);

// one implementation's results for one case: out, lse, dqkv (host fp32) and whether its backward repeated
typedef struct {
    float *out, *lse, *dqkv;
    int repeatable;
} Result;

static int check_case(int B, int T, int NH, int HS) {
    int ok = 1, C = NH * HS;
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nstat = (size_t)B * NH * T;
    float* qkv = make_random(nqkv, 1.0f);
    float* dout = make_random(nout, 1.0f);
    floatX *d_qkv = to_device_x(qkv, nqkv), *d_dout = to_device_x(dout, nout);
    floatX* d_out = (floatX*)cudaMallocCheck(nout * sizeof(floatX));
    floatX* d_dqkv = (floatX*)cudaMallocCheck(nqkv * sizeof(floatX));
    float* d_lse = (float*)cudaMallocCheck(nstat * sizeof(float));
    float* d_delta = (float*)cudaMallocCheck(nstat * sizeof(float));
    float* out_ref = (float*)mallocCheck(nout * sizeof(float));
    float* att = (float*)mallocCheck((size_t)B * NH * T * T * sizeof(float));
    attention_forward_cpu(out_ref, att, qkv, B, T, C, NH);
    float* dqkv_ref = (float*)callocCheck(nqkv, sizeof(float));
    attention_backward_cpu(dqkv_ref, dout, qkv, att, B, T, C, NH);
    printf("-- B=%d T=%d NH=%d HS=%d\n", B, T, NH, HS);
    char name[64];
    // runs fwd then bwd (from its own out and lse) twice; the second backward must equal the first bit for bit
    auto run = [&](fwd_fn f, bwd_fn g) {
        Result r;
        cudaCheck(cudaMemset(d_dqkv, 0xff, nqkv * sizeof(floatX)));  // NaN bf16: a missed element fails
        f(d_out, d_lse, d_qkv, B, T, C, NH, 0);
        g(d_dqkv, d_delta, d_dout, d_qkv, d_out, d_lse, B, T, C, NH, 0);
        r.out = from_device_x(d_out, nout);
        r.lse = from_device_f(d_lse, nstat);
        r.dqkv = from_device_x(d_dqkv, nqkv);
        g(d_dqkv, d_delta, d_dout, d_qkv, d_out, d_lse, B, T, C, NH, 0);
        float* again = from_device_x(d_dqkv, nqkv);
        r.repeatable = memcmp(again, r.dqkv, nqkv * sizeof(float)) == 0;
        free(again);
        return r;
    };
    auto compare = [&](const char* who, const Result& r, const Result* ref) {
        snprintf(name, sizeof(name), "%s fwd vs cpu", who);
        ok &= check_close(name, r.out, out_ref, nout, DEV_ATOL, DEV_RTOL);
        snprintf(name, sizeof(name), "%s dqkv vs cpu", who);
        ok &= check_close(name, r.dqkv, dqkv_ref, nqkv, 2 * DEV_ATOL, 2 * DEV_RTOL);
        if (ref) {
            snprintf(name, sizeof(name), "%s fwd vs cc", who);
            ok &= check_close(name, r.out, ref->out, nout, DEV_ATOL, DEV_RTOL);
            snprintf(name, sizeof(name), "%s lse vs cc", who);
            ok &= check_close(name, r.lse, ref->lse, nstat, 1e-3f, 1e-3f);
            snprintf(name, sizeof(name), "%s dqkv vs cc", who);
            ok &= check_close(name, r.dqkv, ref->dqkv, nqkv, 2 * DEV_ATOL, 2 * DEV_RTOL);
        }
        printf("%-24s %s\n", who, r.repeatable ? "OK    backward repeats bit for bit" : "FAIL  backward does not repeat");
        ok &= r.repeatable;
    };
    Result cc = run(attention_forward_cc, attention_backward_cc);
    compare("cc", cc, NULL);
#if !defined(ENABLE_FP32)
    Result tc = run(attention_forward_tc, attention_backward_tc);
    compare("tc", tc, &cc);
#endif
#ifdef ENABLE_CUDNN
    char err[256];
    if (cudnn_att_prepare(B, T, NH, HS, err, sizeof(err)) != 0) {
        printf("%-24s FAIL  %s\n", "cudnn prepare", err);
        ok = 0;
    } else {
        Result cu = run(
            [](floatX* o, float* l, const floatX* x, int b, int t, int c, int nh, cudaStream_t s) {
                cudnn_att_forward(o, l, x, b, t, nh, c / nh, s);
            },
            [](floatX* dx, float* de, const floatX* dy, const floatX* x, const floatX* o, const float* l, int b, int t,
               int c, int nh, cudaStream_t s) { cudnn_att_backward(dx, de, dy, x, o, l, b, t, nh, c / nh, s); });
        compare("cudnn", cu, &cc);
    }
#endif
    cudaCheck(cudaFree(d_qkv)); cudaCheck(cudaFree(d_dout)); cudaCheck(cudaFree(d_out)); cudaCheck(cudaFree(d_dqkv));
    cudaCheck(cudaFree(d_lse)); cudaCheck(cudaFree(d_delta));
    free(qkv); free(dout); free(out_ref); free(att); free(dqkv_ref);
    return ok;
}

int main(void) {
    int ok = 1;
#ifdef ENABLE_CUDNN
    cudnn_att_init();
#endif
    // T: one tile, not a multiple of the tile (several tiles, partial last), a single row, a longer sequence
    int cases[][3] = {{2, 64, 3}, {2, 100, 3}, {1, 1, 2}, {2, 257, 2}};  // B, T, NH
    for (int hs = 64; hs <= 128; hs *= 2) {
        for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
            ok &= check_case(cases[c][0], cases[c][1], cases[c][2], hs);
        }
    }

    // timing: GPT-2 124M heads (NH 12, HS 64), and NH 6 HS 128 (the same C), B = 4
    printf("\n%4s %4s %4s %6s %9s %9s %9s %9s", "B", "NH", "HS", "T", "cc fwd", "cc bwd", "tc fwd", "tc bwd");
#ifdef ENABLE_CUDNN
    printf(" %9s %9s", "cudnn fwd", "cudnn bwd");
#endif
    printf("   (ms)\n");
    int Bt = 4, Ct = 768, Tmax = 1024;
    floatX* x = (floatX*)cudaMallocCheck((size_t)Bt * Tmax * 3 * Ct * sizeof(floatX));
    floatX* y = (floatX*)cudaMallocCheck((size_t)Bt * Tmax * Ct * sizeof(floatX));
    floatX* dx = (floatX*)cudaMallocCheck((size_t)Bt * Tmax * 3 * Ct * sizeof(floatX));
    float* l = (float*)cudaMallocCheck((size_t)Bt * 12 * Tmax * sizeof(float));
    float* dl = (float*)cudaMallocCheck((size_t)Bt * 12 * Tmax * sizeof(float));
    cudaCheck(cudaMemset(x, 0, (size_t)Bt * Tmax * 3 * Ct * sizeof(floatX)));
    for (int hs = 64; hs <= 128; hs *= 2) {
        int NHt = Ct / hs;
        for (int t = 128; t <= Tmax; t *= 2) {
            float f = time_ms([&] { attention_forward_cc(y, l, x, Bt, t, Ct, NHt, 0); }, 10);
            float g = time_ms([&] { attention_backward_cc(dx, dl, y, x, y, l, Bt, t, Ct, NHt, 0); }, 10);
            printf("%4d %4d %4d %6d %9.4f %9.4f", Bt, NHt, hs, t, f, g);
#if !defined(ENABLE_FP32)
            f = time_ms([&] { attention_forward_tc(y, l, x, Bt, t, Ct, NHt, 0); }, 10);
            g = time_ms([&] { attention_backward_tc(dx, dl, y, x, y, l, Bt, t, Ct, NHt, 0); }, 10);
            printf(" %9.4f %9.4f", f, g);
#else
            printf(" %9s %9s", "-", "-");
#endif
#ifdef ENABLE_CUDNN
            char err2[256];
            if (cudnn_att_prepare(Bt, t, NHt, hs, err2, sizeof(err2)) == 0) {  // plans built outside the timing
                float cf = time_ms([&] { cudnn_att_forward(y, l, x, Bt, t, NHt, hs, 0); }, 10);
                float cg = time_ms([&] { cudnn_att_backward(dx, dl, y, x, y, l, Bt, t, NHt, hs, 0); }, 10);
                printf(" %9.4f %9.4f", cf, cg);
            } else {
                printf(" %19s", "no cuDNN engine");
            }
#endif
            printf("\n");
        }
    }
#ifdef ENABLE_CUDNN
    cudnn_att_destroy();
#endif
    printf("%s\n", ok ? "attention: all checks passed" : "attention: FAILED");
    return ok ? 0 : 1;
}

// dev/cuda/attention.cu — flash-style causal attention (forward, backward) vs the CPU path's attention,
// which materialises the (B,NH,T,T) probabilities; then a timing sweep over T.
// In a cuDNN build (the Makefile found cuDNN, bf16, USE_CUDNN not 0) the cuDNN path (llmc/cudnn_att.cpp)
// is checked too: against the CPU path and against our kernels (out, lse, dqkv), its backward must repeat
// bit for bit, and the sweep times both. Tolerances: bf16 outputs as our kernels (DEV_ATOL/DEV_RTOL, twice
// that for dqkv); the fp32 log-sum-exp within 1e-3 absolute + 1e-3 relative of our kernel's.
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

int main(void) {
    int ok = 1;
    int B = 2, T = 100, NH = 3, C = NH * ATT_HS;  // T not a multiple of the tile on purpose
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C;
    float* qkv = make_random(nqkv, 1.0f);
    float* dout = make_random(nout, 1.0f);
    floatX *d_qkv = to_device_x(qkv, nqkv), *d_dout = to_device_x(dout, nout);
    floatX* d_out = (floatX*)cudaMallocCheck(nout * sizeof(floatX));
    floatX* d_dqkv = (floatX*)cudaMallocCheck(nqkv * sizeof(floatX));
    float* d_lse = (float*)cudaMallocCheck((size_t)B * NH * T * sizeof(float));
    float* d_delta = (float*)cudaMallocCheck((size_t)B * NH * T * sizeof(float));
    attention_forward(d_out, d_lse, d_qkv, B, T, C, NH, 0);
    float* out_ref = (float*)mallocCheck(nout * sizeof(float));
    float* att = (float*)mallocCheck((size_t)B * NH * T * T * sizeof(float));
    attention_forward_cpu(out_ref, att, qkv, B, T, C, NH);
    float* out = from_device_x(d_out, nout);
    ok &= check_close("forward", out, out_ref, nout, DEV_ATOL, DEV_RTOL);
    attention_backward(d_dqkv, d_delta, d_dout, d_qkv, d_out, d_lse, B, T, C, NH, 0);
    float* dqkv_ref = (float*)callocCheck(nqkv, sizeof(float));
    attention_backward_cpu(dqkv_ref, dout, qkv, att, B, T, C, NH);
    ok &= check_close("backward dqkv", from_device_x(d_dqkv, nqkv), dqkv_ref, nqkv, 2 * DEV_ATOL, 2 * DEV_RTOL);

#ifdef ENABLE_CUDNN
    cudnn_att_init();
    char err[256];
    if (cudnn_att_prepare(B, T, NH, ATT_HS, err, sizeof(err)) != 0) {
        printf("cudnn prepare            FAIL  %s\n", err);
        ok = 0;
    } else {
        floatX* c_out = (floatX*)cudaMallocCheck(nout * sizeof(floatX));
        floatX* c_dqkv = (floatX*)cudaMallocCheck(nqkv * sizeof(floatX));
        float* c_lse = (float*)cudaMallocCheck((size_t)B * NH * T * sizeof(float));
        cudnn_att_forward(c_out, c_lse, d_qkv, B, T, NH, ATT_HS, 0);
        float* cout_h = from_device_x(c_out, nout);
        ok &= check_close("cudnn forward vs cpu", cout_h, out_ref, nout, DEV_ATOL, DEV_RTOL);
        ok &= check_close("cudnn forward vs ours", cout_h, out, nout, DEV_ATOL, DEV_RTOL);
        ok &= check_close("cudnn lse vs ours", from_device_f(c_lse, (size_t)B * NH * T),
                          from_device_f(d_lse, (size_t)B * NH * T), (size_t)B * NH * T, 1e-3f, 1e-3f);
        // the backward from the same inputs as ours (our forward's out and lse) and from cuDNN's own
        cudnn_att_backward(c_dqkv, d_delta, d_dout, d_qkv, d_out, d_lse, B, T, NH, ATT_HS, 0);
        float* cdqkv_h = from_device_x(c_dqkv, nqkv);
        ok &= check_close("cudnn dqkv vs cpu", cdqkv_h, dqkv_ref, nqkv, 2 * DEV_ATOL, 2 * DEV_RTOL);
        ok &= check_close("cudnn dqkv vs ours", cdqkv_h, from_device_x(d_dqkv, nqkv), nqkv, 2 * DEV_ATOL, 2 * DEV_RTOL);
        cudnn_att_backward(c_dqkv, d_delta, d_dout, d_qkv, c_out, c_lse, B, T, NH, ATT_HS, 0);
        float* cdqkv_own = from_device_x(c_dqkv, nqkv);
        ok &= check_close("cudnn fwd+bwd vs cpu", cdqkv_own, dqkv_ref, nqkv, 2 * DEV_ATOL, 2 * DEV_RTOL);
        cudnn_att_backward(c_dqkv, d_delta, d_dout, d_qkv, c_out, c_lse, B, T, NH, ATT_HS, 0);
        int same = memcmp(cdqkv_own, from_device_x(c_dqkv, nqkv), nqkv * sizeof(float)) == 0;
        printf("%-24s %s  (the trainer's runs repeat bit for bit only if this does)\n", "cudnn bwd repeatable",
               same ? "OK  " : "FAIL");
        ok &= same;
    }
#endif

    // timing: GPT-2 124M heads (NH 12, HS 64), B = 4
    int Bt = 4, NHt = 12, Ct = NHt * ATT_HS, Tmax = 1024;
    floatX* x = (floatX*)cudaMallocCheck((size_t)Bt * Tmax * 3 * Ct * sizeof(floatX));
    floatX* y = (floatX*)cudaMallocCheck((size_t)Bt * Tmax * Ct * sizeof(floatX));
    floatX* dx = (floatX*)cudaMallocCheck((size_t)Bt * Tmax * 3 * Ct * sizeof(floatX));
    float* l = (float*)cudaMallocCheck((size_t)Bt * NHt * Tmax * sizeof(float));
    float* dl = (float*)cudaMallocCheck((size_t)Bt * NHt * Tmax * sizeof(float));
    cudaCheck(cudaMemset(x, 0, (size_t)Bt * Tmax * 3 * Ct * sizeof(floatX)));
    printf("\n%4s %4s %6s %10s %10s", "B", "NH", "T", "fwd ms", "bwd ms");
#ifdef ENABLE_CUDNN
    printf(" %12s %12s", "cudnn fwd", "cudnn bwd");
#endif
    printf("\n");
    for (int t = 128; t <= Tmax; t *= 2) {
        float f = time_ms([&] { attention_forward(y, l, x, Bt, t, Ct, NHt, 0); }, 10);
        float g = time_ms([&] { attention_backward(dx, dl, y, x, y, l, Bt, t, Ct, NHt, 0); }, 10);
        printf("%4d %4d %6d %10.4f %10.4f", Bt, NHt, t, f, g);
#ifdef ENABLE_CUDNN
        char err2[256];
        if (cudnn_att_prepare(Bt, t, NHt, ATT_HS, err2, sizeof(err2)) == 0) {  // plans built outside the timing
            float cf = time_ms([&] { cudnn_att_forward(y, l, x, Bt, t, NHt, ATT_HS, 0); }, 10);
            float cg = time_ms([&] { cudnn_att_backward(dx, dl, y, x, y, l, Bt, t, NHt, ATT_HS, 0); }, 10);
            printf(" %12.4f %12.4f", cf, cg);
        } else {
            printf(" %25s", "no cuDNN engine");
        }
#endif
        printf("\n");
    }
#ifdef ENABLE_CUDNN
    cudnn_att_destroy();
#endif
    printf("%s\n", ok ? "attention: all checks passed" : "attention: FAILED");
    return ok ? 0 : 1;
}

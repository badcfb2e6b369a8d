// dev/cuda/hybrid_apply.cu — hybrid mode's kernels (Predict along the drift, rollback, AdamW fused with the
// drift, the look-ahead and the statistics) against the CPU loops of hybrid/apply.h, which are the
// reference: Predict and rollback must match bit for bit; the fused AdamW with a zero look-ahead must equal
// the plain AdamW kernel bit for bit, and the CPU pass to fp32 rounding, its statistics to 1e-3 (an ulp of
// an update; the GPU sums in another fixed order). Then timings.
// make dev/cuda/hybrid_apply && ./dev/cuda/hybrid_apply
#include "dev/cuda/dev_common.cuh"
#include "hybrid/apply.cuh"
#include "hybrid/lookahead.h"  // lookahead_default_gamma

// a short schedule's drift decay (172 steps: 0.942), not 0.99, so that a kernel ignoring gamma shows
static const float GAMMA = lookahead_default_gamma(172);

int main(void) {
    int ok = 1;
    const int nblocks = 7;
    size_t sizes[nblocks] = {1000003, 77, 4096, 1, 250000, 12345, 3};  // uneven on purpose
    size_t offsets[nblocks + 1];
    offsets[0] = 0;
    for (int b = 0; b < nblocks; b++) { offsets[b + 1] = offsets[b] + sizes[b]; }
    size_t P = offsets[nblocks];
    float* theta = make_random(P, 1.0f);
    float* d = make_random(P, 1e-3f);
    float* m = make_random(P, 1e-3f);
    float* v = make_random(P, 1e-6f);
    float* g = make_random(P, 1e-2f);
    for (size_t i = 0; i < P; i++) { v[i] = fabsf(v[i]); }
    float coef[nblocks];
    for (int b = 0; b < nblocks; b++) { coef[b] = dev_randf() * 2.0f; }
    float* d_theta = to_device_f(theta, P);
    float *d_d = to_device_f(d, P), *d_m = to_device_f(m, P), *d_v = to_device_f(v, P), *d_g = to_device_f(g, P);
    float* d_keep = (float*)cudaMallocCheck(P * sizeof(float));
    floatX* d_x = (floatX*)cudaMallocCheck(P * sizeof(floatX));
    size_t* d_off = (size_t*)cudaMallocCheck((nblocks + 1) * sizeof(size_t));
    float* d_coef = to_device_f(coef, nblocks);
    cudaCheck(cudaMemcpy(d_off, offsets, (nblocks + 1) * sizeof(size_t), cudaMemcpyHostToDevice));

    {
        // three Predict steps, the first keeping theta_0, on the GPU and with the CPU loop
        float* ref = (float*)mallocCheck(P * sizeof(float));
        float* keep = (float*)mallocCheck(P * sizeof(float));
        memcpy(ref, theta, P * sizeof(float));
        cudaCheck(cudaMemcpy(d_theta, theta, P * sizeof(float), cudaMemcpyHostToDevice));
        for (int k = 0; k < 3; k++) {
            apply_predict(ref, keep, d, offsets, nblocks, coef, k == 0);
            hybrid_predict(d_theta, d_x, d_keep, d_d, d_off, nblocks, d_coef, 0, P, k == 0, 42u, 0);
        }
        float* got = from_device_f(d_theta, P);
        int same = memcmp(got, ref, P * sizeof(float)) == 0;
        printf("%-34s %s\n", "predict x3 along the drift, bit-exact", same ? "OK" : "FAIL");
        ok &= same;
        ok &= check_close("floatX copy of the predicted", from_device_x(d_x, P), ref, P, 0.0f, 1.0f / 128);
        hybrid_rollback_device(d_theta, d_x, d_keep, 0, P, 42u, 0);
        float* back = from_device_f(d_theta, P);
        same = memcmp(back, theta, P * sizeof(float)) == 0;
        printf("%-34s %s\n", "rollback, bit-exact", same ? "OK" : "FAIL");
        ok &= same;
        free(ref); free(keep); free(got); free(back);
    }

    // a measured step with a zero look-ahead (the drift's prefill) against
    // (1) the plain AdamW kernel on the GPU: the same weights, moments and floatX copy, bit for bit;
    // (2) the CPU pass apply_adamw_lookahead: weights to a few ulp (gcc and nvcc may fuse other
    //     multiply-adds), so delta = theta' - theta may differ by an ulp of theta (~1e-3 of delta here):
    //     statistics to 1e-3 relative, the drift to 1e-8 absolute
    float wd[nblocks];
    for (int b = 0; b < nblocks; b++) { wd[b] = b % 2 ? 0.1f : 0.0f; }
    float* d_wd = to_device_f(wd, nblocks);
    double* d_stats = (double*)cudaMallocCheck(nblocks * 3 * sizeof(double));
    double* d_part = (double*)cudaMallocCheck((size_t)nblocks * HYBRID_GPU_CHUNKS * 3 * sizeof(double));
    float *d_p2 = (float*)cudaMallocCheck(P * sizeof(float)), *d_m2 = (float*)cudaMallocCheck(P * sizeof(float));
    float* d_v2 = (float*)cudaMallocCheck(P * sizeof(float));
    floatX* d_x2 = (floatX*)cudaMallocCheck(P * sizeof(floatX));
    {
        ApplyAdamStep st = {0.9f, 0.95f, 1e-8f, wd, 5, 2e-4f, 0.7f, NULL, 0, NULL, 0.0f, 0.0f};
        float zeros[2 * nblocks] = {0};
        float* d_zeros = to_device_f(zeros, 2 * nblocks);
        ApplyAdamStep dst = st;
        dst.weight_decay = d_wd;
        float *pr = (float*)mallocCheck(P * 4), *mr = (float*)mallocCheck(P * 4), *vr = (float*)mallocCheck(P * 4);
        float* dref = (float*)mallocCheck(P * 4);
        memcpy(pr, theta, P * 4); memcpy(mr, m, P * 4); memcpy(vr, v, P * 4); memcpy(dref, d, P * 4);
        double stats_ref[nblocks * 3], part_ref[nblocks * APPLY_CHUNKS * 3];
        apply_adamw_lookahead(pr, g, mr, vr, dref, &st, GAMMA, zeros, zeros + nblocks, offsets, nblocks,
                              part_ref, stats_ref);
        cudaCheck(cudaMemcpy(d_d, d, P * 4, cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(d_theta, theta, P * 4, cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(d_m, m, P * 4, cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(d_v, v, P * 4, cudaMemcpyHostToDevice));
        hybrid_adamw_lookahead_device(d_stats, d_part, d_theta, d_x, d_g, d_m, d_v, d_d, &dst, GAMMA, d_zeros,
                                      d_off, nblocks, 0, P, 42u, 0);
        // the plain kernel, one launch per block as the trainer's gpt2_update (one per tensor)
        cudaCheck(cudaMemcpy(d_p2, theta, P * 4, cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(d_m2, m, P * 4, cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(d_v2, v, P * 4, cudaMemcpyHostToDevice));
        for (int b = 0; b < nblocks; b++) {
            size_t o = offsets[b];
            adamw_update(d_p2 + o, d_x2 + o, d_g + o, d_m2 + o, d_v2 + o, sizes[b], o, st.lr, st.beta1, st.beta2, st.t,
                         st.eps, wd[b], st.grad_scale, 42u, 0);
        }
        float *pf = from_device_f(d_theta, P), *pp = from_device_f(d_p2, P);
        float *mf = from_device_f(d_m, P), *mp = from_device_f(d_m2, P);
        float *vf = from_device_f(d_v, P), *vp = from_device_f(d_v2, P);
        float *xf = from_device_x(d_x, P), *xp = from_device_x(d_x2, P);
        int same = !memcmp(pf, pp, P * 4) && !memcmp(mf, mp, P * 4) && !memcmp(vf, vp, P * 4) && !memcmp(xf, xp, P * 4);
        printf("%-34s %s\n", "fused adamw (no look-ahead) = plain, bits", same ? "OK" : "FAIL");
        ok &= same;
        ok &= check_close("fused adamw weights vs CPU", pf, pr, P, 1e-7f, 1e-6f);
        double stats[nblocks * 3];
        cudaCheck(cudaMemcpy(stats, d_stats, sizeof(stats), cudaMemcpyDeviceToHost));
        int sok = 1;
        for (int i = 0; i < nblocks * 3; i++) {
            if (!(fabs(stats[i] - stats_ref[i]) <= 1e-3 * fabs(stats_ref[i]) + 1e-30)) {
                printf("  stat %d: %.17g vs %.17g\n", i, stats[i], stats_ref[i]);
                sok = 0;
            }
        }
        printf("%-34s %s\n", "fused stats vs CPU", sok ? "OK" : "FAIL");
        ok &= sok;
        ok &= check_close("drift vs CPU", from_device_f(d_d, P), dref, P, 1e-8f, 1e-5f);
        cudaCheck(cudaFree(d_zeros));
        free(pr); free(mr); free(vr); free(dref); free(pf); free(pp); free(mf); free(mp); free(vf); free(vp);
        free(xf); free(xp);
    }
    // the look-ahead (apply_adamw_lookahead): the same pass with beta_prev and beta_next * d added, and a
    // trainer's EMA folded in; weights and the EMA to a few ulp of the CPU loop (as above), the drift to 1e-8
    {
        ApplyAdamStep st = {0.9f, 0.95f, 1e-8f, wd, 5, 2e-4f, 0.7f, NULL, 0, NULL, 0.0f, 0.0f};
        float* eref = (float*)mallocCheck(P * 4);
        for (size_t i = 0; i < P; i++) { eref[i] = theta[i] * 0.999f; }  // an average a little off the weights
        float* d_e = to_device_f(eref, P);
        average_ema_coefs(0.9f, 5, &st.ema_w, &st.ema_k);
        st.ema = eref;
        ApplyAdamStep dst = st;
        dst.weight_decay = d_wd;
        dst.ema = d_e;
        float betas[2 * nblocks];
        for (int b = 0; b < nblocks; b++) { betas[b] = 0.1f * b; betas[nblocks + b] = 0.45f - 0.05f * b; }
        float* d_betas = to_device_f(betas, 2 * nblocks);
        float *pr = (float*)mallocCheck(P * 4), *mr = (float*)mallocCheck(P * 4), *vr = (float*)mallocCheck(P * 4);
        float* dref = (float*)mallocCheck(P * 4);
        memcpy(pr, theta, P * 4); memcpy(mr, m, P * 4); memcpy(vr, v, P * 4); memcpy(dref, d, P * 4);
        double stats_ref[nblocks * 3], part_ref[nblocks * APPLY_CHUNKS * 3];
        apply_adamw_lookahead(pr, g, mr, vr, dref, &st, GAMMA, betas, betas + nblocks, offsets, nblocks,
                              part_ref, stats_ref);
        cudaCheck(cudaMemcpy(d_d, d, P * 4, cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(d_theta, theta, P * 4, cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(d_m, m, P * 4, cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(d_v, v, P * 4, cudaMemcpyHostToDevice));
        hybrid_adamw_lookahead_device(d_stats, d_part, d_theta, d_x, d_g, d_m, d_v, d_d, &dst, GAMMA, d_betas,
                                      d_off, nblocks, 0, P, 42u, 0);
        ok &= check_close("look-ahead weights vs CPU", from_device_f(d_theta, P), pr, P, 1e-7f, 1e-6f);
        ok &= check_close("look-ahead drift vs CPU", from_device_f(d_d, P), dref, P, 1e-8f, 1e-5f);
        ok &= check_close("look-ahead EMA vs CPU", from_device_f(d_e, P), eref, P, 1e-7f, 1e-6f);
        free(pr); free(mr); free(vr); free(dref); free(eref);
        cudaCheck(cudaFree(d_e));
        cudaCheck(cudaFree(d_betas));
    }
    // timing: the fused pass vs the plain AdamW kernel over all blocks
    {
        ApplyAdamStep dst = {0.9f, 0.95f, 1e-8f, d_wd, 5, 2e-4f, 0.7f, NULL, 0, NULL, 0.0f, 0.0f};
        float betas[2 * nblocks];
        for (int b = 0; b < 2 * nblocks; b++) { betas[b] = 0.3f; }
        float* d_betas = to_device_f(betas, 2 * nblocks);
        float ms_fused = time_ms([&] {
            hybrid_adamw_lookahead_device(d_stats, d_part, d_theta, d_x, d_g, d_m, d_v, d_d, &dst, GAMMA,
                                          d_betas, d_off, nblocks, 0, P, 1u, 0); }, 20);
        float ms_plain = time_ms([&] {
            adamw_update(d_p2, d_x2, d_g, d_m2, d_v2, P, 0, 2e-4f, 0.9f, 0.95f, 5, 1e-8f, 0.1f, 0.7f, 1u, 0); }, 20);
        printf("AdamW over %zu params: plain %.4f ms, fused with the drift and the look-ahead %.4f ms\n", P, ms_plain,
               ms_fused);
        cudaCheck(cudaFree(d_betas));
    }
    cudaCheck(cudaFree(d_stats)); cudaCheck(cudaFree(d_part)); cudaCheck(cudaFree(d_wd));
    cudaCheck(cudaFree(d_p2)); cudaCheck(cudaFree(d_m2)); cudaCheck(cudaFree(d_v2)); cudaCheck(cudaFree(d_x2));

    // timing: a Predict step over P parameters in one block (GPT-2 124M: P = 124M)
    size_t Pmax = (size_t)1 << 27;
    float* big = (float*)cudaMallocCheck(Pmax * sizeof(float));
    float* bigd = (float*)cudaMallocCheck(Pmax * sizeof(float));
    float* bigk = (float*)cudaMallocCheck(Pmax * sizeof(float));
    floatX* bigx = (floatX*)cudaMallocCheck(Pmax * sizeof(floatX));
    cudaCheck(cudaMemset(big, 0, Pmax * sizeof(float)));
    cudaCheck(cudaMemset(bigd, 0, Pmax * sizeof(float)));
    printf("\n%12s %10s %10s\n", "params", "ms", "GB/s");
    for (size_t n = (size_t)1 << 22; n <= Pmax; n <<= 1) {
        size_t off2[2] = {0, n};
        cudaCheck(cudaMemcpy(d_off, off2, sizeof(off2), cudaMemcpyHostToDevice));
        float ms = time_ms([&] { hybrid_predict(big, bigx, bigk, bigd, d_off, 1, d_coef, 0, n, 0, 1u, 0); }, 10);
        printf("%12zu %10.4f %10.1f\n", n, ms, (double)n * (3 * 4 + sizeof(floatX)) / (ms * 1e-3) / 1e9);
    }
    printf("%s\n", ok ? "hybrid_apply: all checks passed" : "hybrid_apply: FAILED");
    return ok ? 0 : 1;
}

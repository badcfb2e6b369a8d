// dev/cuda/hybrid_apply.cu — hybrid mode's kernels (Predict, rollback, observe) against the CPU loops
// of hybrid/apply.h, which are the reference: Predict and rollback must match bit for bit, the observe
// statistics to double rounding (the GPU sums in another fixed order). Then a timing sweep over sizes.
// make dev/cuda/hybrid_apply && ./dev/cuda/hybrid_apply
#include "dev/cuda/dev_common.cuh"
#include "llmc/hybrid_apply.cuh"

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

    for (int kind = DIRECTION_EMA; kind <= DIRECTION_ADAM; kind++) {
        // three Predict steps, the first keeping theta_0, on the GPU and with the CPU loop
        float* ref = (float*)mallocCheck(P * sizeof(float));
        float* keep = (float*)mallocCheck(P * sizeof(float));
        memcpy(ref, theta, P * sizeof(float));
        cudaCheck(cudaMemcpy(d_theta, theta, P * sizeof(float), cudaMemcpyHostToDevice));
        ApplyDirection host_dir = {kind, d, m, v, 0.271f, 0.0975f, 1e-8f, -3e-4f};
        ApplyDirection dev_dir = host_dir;
        dev_dir.d = d_d; dev_dir.m = d_m; dev_dir.v = d_v;
        for (int k = 0; k < 3; k++) {
            apply_predict(ref, keep, &host_dir, offsets, nblocks, coef, k == 0);
            hybrid_predict(d_theta, d_x, d_keep, dev_dir, d_off, nblocks, d_coef, 0, P, k == 0, 42u, 0);
        }
        float* got = from_device_f(d_theta, P);
        int same = memcmp(got, ref, P * sizeof(float)) == 0;
        printf("%-34s %s\n", kind == DIRECTION_EMA ? "predict x3 (ema), bit-exact" : "predict x3 (adam), bit-exact",
               same ? "OK" : "FAIL");
        ok &= same;
        ok &= check_close("floatX copy of the predicted", from_device_x(d_x, P), ref, P, 0.0f, 1.0f / 128);
        hybrid_rollback_device(d_theta, d_x, d_keep, 0, P, 42u, 0);
        float* back = from_device_f(d_theta, P);
        same = memcmp(back, theta, P * sizeof(float)) == 0;
        printf("%-34s %s\n", "rollback, bit-exact", same ? "OK" : "FAIL");
        ok &= same;
        free(ref); free(keep); free(got); free(back);
    }

    // observe: statistics and the EMA direction update, ema and adam
    for (int kind = DIRECTION_EMA; kind <= DIRECTION_ADAM; kind++) {
        float wd[nblocks];
        for (int b = 0; b < nblocks; b++) { wd[b] = b % 2 ? 0.1f : 0.0f; }
        float* d_wd = to_device_f(wd, nblocks);
        ApplyAdamStep st = {0.9f, 0.95f, 1e-8f, wd, 5, 2e-4f, 3e-4f, 0.7f};
        ApplyAdamStep dst = st;
        dst.weight_decay = d_wd;
        float* dref = (float*)mallocCheck(P * sizeof(float));
        memcpy(dref, d, P * sizeof(float));
        double stats_ref[nblocks * 3];
        apply_observe(dref, theta, m, v, g, &st, kind, 0.98f, offsets, nblocks, stats_ref);
        cudaCheck(cudaMemcpy(d_d, d, P * sizeof(float), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(d_theta, theta, P * sizeof(float), cudaMemcpyHostToDevice));
        double* d_stats = (double*)cudaMallocCheck(nblocks * 3 * sizeof(double));
        double* d_part = (double*)cudaMallocCheck((size_t)nblocks * APPLY_CHUNKS * 3 * sizeof(double));
        hybrid_observe_device(d_stats, d_part, d_d, d_theta, d_m, d_v, d_g, &dst, kind, 0.98f, d_off, nblocks, 0, P, 0);
        double stats[nblocks * 3];
        cudaCheck(cudaMemcpy(stats, d_stats, sizeof(stats), cudaMemcpyDeviceToHost));
        int sok = 1;
        for (int i = 0; i < nblocks * 3; i++) {
            if (!(fabs(stats[i] - stats_ref[i]) <= 1e-9 * fabs(stats_ref[i]) + 1e-30)) { sok = 0; }
        }
        printf("%-34s %s\n", kind == DIRECTION_EMA ? "observe stats (ema)" : "observe stats (adam)", sok ? "OK" : "FAIL");
        ok &= sok;
        float* dgot = from_device_f(d_d, P);
        int same = memcmp(dgot, dref, P * sizeof(float)) == 0;
        printf("%-34s %s\n", "observe direction update, bit-exact", same ? "OK" : "FAIL");
        ok &= same;
        free(dref); free(dgot);
        cudaCheck(cudaFree(d_stats)); cudaCheck(cudaFree(d_part)); cudaCheck(cudaFree(d_wd));
    }

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
        ApplyDirection dir = {DIRECTION_EMA, bigd, NULL, NULL, 1.0f, 1.0f, 1e-8f, -1.0f};
        float ms = time_ms([&] { hybrid_predict(big, bigx, bigk, dir, d_off, 1, d_coef, 0, n, 0, 1u, 0); }, 10);
        printf("%12zu %10.4f %10.1f\n", n, ms, (double)n * (3 * 4 + sizeof(floatX)) / (ms * 1e-3) / 1e9);
    }
    printf("%s\n", ok ? "hybrid_apply: all checks passed" : "hybrid_apply: FAILED");
    return ok ? 0 : 1;
}

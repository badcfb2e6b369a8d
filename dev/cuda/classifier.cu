// dev/cuda/classifier.cu — fused softmax + cross-entropy + backward vs a CPU reference that stores the
// probabilities; then a timing sweep at GPT-2's vocabulary.  make dev/cuda/classifier && ./dev/cuda/classifier
#include "dev/cuda/dev_common.cuh"
#include "llmc/fused_classifier.cuh"

// N rows of V logits (rows Vp apart) against the CPU loop
static int check_classifier(int N, int V, int Vp) {
    int ok = 1;
    printf("-- N %d, V %d, Vp %d (%s kernel)\n", N, V, Vp, Vp % PACK == 0 ? "packed" : "W = 1");
    float dloss = 1.0f / N;
    float* logits = make_random((size_t)N * Vp, 4.0f);
    int* targets = (int*)mallocCheck(N * sizeof(int));
    for (int i = 0; i < N; i++) { targets[i] = (int)((dev_randf() + 1.0f) * 0.5f * V) % V; }
    floatX* d_logits = to_device_x(logits, (size_t)N * Vp);
    float* d_losses = (float*)cudaMallocCheck(N * sizeof(float));
    int* d_targets = (int*)cudaMallocCheck(N * sizeof(int));
    cudaCheck(cudaMemcpy(d_targets, targets, N * sizeof(int), cudaMemcpyHostToDevice));
    float* loss_ref = (float*)mallocCheck(N * sizeof(float));
    float* dlogits_ref = (float*)mallocCheck((size_t)N * Vp * sizeof(float));
    for (int r = 0; r < N; r++) {  // as train_gpt2.c: probs = softmax(logits[:V]), loss = -log(probs[target])
        const float* x = logits + (size_t)r * Vp;
        float maxv = -INFINITY;
        for (int v = 0; v < V; v++) { maxv = fmaxf(maxv, x[v]); }
        double sum = 0.0;
        for (int v = 0; v < V; v++) { sum += exp((double)x[v] - maxv); }
        loss_ref[r] = -logf((float)(exp((double)x[targets[r]] - maxv) / sum));
        for (int v = 0; v < Vp; v++) {
            float p = v < V ? (float)(exp((double)x[v] - maxv) / sum) : 0.0f;
            dlogits_ref[(size_t)r * Vp + v] = v < V ? (p - (v == targets[r] ? 1.0f : 0.0f)) * dloss : 0.0f;
        }
    }
    fused_classifier(d_logits, d_losses, d_targets, 0.0f, 0, N, V, Vp, 0);  // forward only: logits kept
    ok &= check_close("loss (forward only)", from_device_f(d_losses, N), loss_ref, N, 1e-4f, 1e-5f);
    fused_classifier(d_logits, d_losses, d_targets, dloss, 1, N, V, Vp, 0);  // accumulates: 2x loss
    for (int r = 0; r < N; r++) { loss_ref[r] *= 2.0f; }
    ok &= check_close("loss (accumulated x2)", from_device_f(d_losses, N), loss_ref, N, 2e-4f, 1e-5f);
    ok &= check_close("dlogits", from_device_x(d_logits, (size_t)N * Vp), dlogits_ref, (size_t)N * Vp,
                      DEV_ATOL * dloss, DEV_RTOL);

    return ok;
}

int main(void) {
    int ok = check_classifier(64, 50257, 50304);
    ok &= check_classifier(16, 1001, 1001);  // rows that do not split into packs: W = 1
    int V = 50257, Vp = 50304;
    int Nmax = 8192;
    floatX* x = (floatX*)cudaMallocCheck((size_t)Nmax * Vp * sizeof(floatX));
    float* l = (float*)cudaMallocCheck(Nmax * sizeof(float));
    int* t = (int*)cudaMallocCheck(Nmax * sizeof(int));
    cudaCheck(cudaMemset(x, 0, (size_t)Nmax * Vp * sizeof(floatX)));
    cudaCheck(cudaMemset(t, 0, Nmax * sizeof(int)));
    printf("\n%6s %6s %10s %10s\n", "N", "Vp", "ms", "GB/s");
    for (int n = 1024; n <= Nmax; n *= 2) {
        float ms = time_ms([&] { fused_classifier(x, l, t, 1.0f / n, 1, n, V, Vp, 0); }, 10);
        printf("%6d %6d %10.4f %10.1f\n", n, Vp, ms, 2.0 * n * Vp * sizeof(floatX) / (ms * 1e-3) / 1e9);
    }
    printf("%s\n", ok ? "classifier: all checks passed" : "classifier: FAILED");
    return ok ? 0 : 1;
}

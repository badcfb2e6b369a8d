/*
 * dev/bench_loader.c — what a micro batch costs the data loader in each layout (llmc/dataloader.h):
 * --rows random (B reads of T+1 tokens at their own places) against --rows contiguous (one read of B*T+1),
 * in microseconds per micro batch over the shipped GPT-2 shards, at make bench's shapes. A step of those
 * shapes takes hundreds of milliseconds, so this bounds the loader's share of a step.
 *   build/bench_loader [PATTERN] [BATCHES]   (defaults: data/default/train_*.bin, 20000)
 */
#include <stdio.h>
#include <stdlib.h>
#include "llmc/dataloader.h"
#include "llmc/utils.h"

static double usec_per_batch(const char* pattern, int B, int T, int order, int n) {
    DataLoader l;
    dataloader_init(&l, pattern, B, T, GPT2_VOCAB, order, 1337);
    for (int i = 0; i < 100; i++) { dataloader_next_batch(&l); }  // warm the page cache
    double t0 = clock_seconds();
    long long sum = 0;
    for (int i = 0; i < n; i++) {
        dataloader_next_batch(&l);
        sum += l.inputs[0];
    }
    double dt = clock_seconds() - t0;
    dataloader_free(&l);
    if (sum == -1) { printf("%lld\n", sum); }  // keeps the reads live
    return 1e6 * dt / n;
}

int main(int argc, char** argv) {
    const char* pattern = argc > 1 ? argv[1] : "data/default/train_*.bin";
    int n = argc > 2 ? atoi(argv[2]) : 20000;
    const int shapes[3][2] = {{4, 64}, {8, 256}, {8, 128}};
    printf("loader: microseconds per micro batch over %s (%d batches)\n", pattern, n);
    printf("%-10s %12s %12s %8s\n", "B x T", "contiguous", "random", "ratio");
    for (int k = 0; k < 3; k++) {
        int B = shapes[k][0], T = shapes[k][1];
        double c = usec_per_batch(pattern, B, T, LOADER_CHUNKS, n);
        double r = usec_per_batch(pattern, B, T, LOADER_ROWS, n);
        printf("%3d x %-4d %12.2f %12.2f %7.2fx\n", B, T, c, r, r / c);
    }
    return 0;
}

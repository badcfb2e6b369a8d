/*
 * llmc/encoder.cuh — token + position embedding, forward and backward.
 * out[b,t,:] = wte[inp[b,t],:] + wpe[t,:]. The backward pass for wte sums the gradient of every position
 * that holds a given token; the host groups positions by token (counting sort, stable) so that each
 * token's sum runs in a fixed order on one thread per channel: deterministic, no atomics.
 */
#ifndef LLMC_ENCODER_CUH
#define LLMC_ENCODER_CUH

#include "llmc/cuda_common.cuh"

__global__ void encoder_forward_kernel(floatX* out, const int* inp, const floatX* wte, const floatX* wpe,
                                       int B, int T, int C) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * T * C) { return; }
    int c = (int)(idx % C);
    size_t bt = idx / C;
    int t = (int)(bt % T);
    int ix = inp[bt];
    out[idx] = (floatX)(to_float(wte[(size_t)ix * C + c]) + to_float(wpe[(size_t)t * C + c]));
}

void encoder_forward(floatX* out, const int* inp, const floatX* wte, const floatX* wpe,
                     int B, int T, int C, cudaStream_t stream) {
    // out: (B,T,C), inp: (B,T) token ids, wte: (Vp,C), wpe: (maxT,C)
    const int block = 256;
    encoder_forward_kernel<<<ceil_div((long)B * T * C, block), block, 0, stream>>>(out, inp, wte, wpe, B, T, C);
    cudaCheck(cudaGetLastError());
}

// dwpe[t,c] += sum_b dout[b,t,c]
__global__ void encoder_backward_wpe_kernel(float* dwpe, const floatX* dout, int B, int T, int C) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= T * C) { return; }
    float sum = 0.0f;
    for (int b = 0; b < B; b++) { sum += to_float(dout[(size_t)b * T * C + idx]); }
    dwpe[idx] += sum;
}

// dwte[token,c] += sum over the positions holding token; bucket_start/bucket_pos from encoder_buckets
__global__ void encoder_backward_wte_kernel(float* dwte, const floatX* dout, const int* bucket_token,
                                            const int* bucket_start, const int* bucket_pos, int C) {
    int bucket = blockIdx.x;
    int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) { return; }
    float sum = 0.0f;
    for (int k = bucket_start[bucket]; k < bucket_start[bucket + 1]; k++) {
        sum += to_float(dout[(size_t)bucket_pos[k] * C + c]);
    }
    dwte[(size_t)bucket_token[bucket] * C + c] += sum;
}

// host side: group the B*T positions by token. bucket_token (<= N), bucket_start (<= N+1), bucket_pos (N);
// count (V ints) is scratch. Returns the number of distinct tokens. O(N + V), no allocation.
int encoder_buckets(int* bucket_token, int* bucket_start, int* bucket_pos, int* count,
                    const int* inp, int N, int V) {
    memset(count, 0, (size_t)V * sizeof(int));
    for (int i = 0; i < N; i++) { count[inp[i]]++; }
    int nb = 0, off = 0;
    for (int v = 0; v < V; v++) {
        if (count[v] == 0) { continue; }
        bucket_token[nb] = v;
        bucket_start[nb] = off;
        int n = count[v];
        count[v] = off;  // becomes the write cursor of this token
        off += n;
        nb++;
    }
    bucket_start[nb] = off;
    for (int i = 0; i < N; i++) { bucket_pos[count[inp[i]]++] = i; }
    return nb;
}

void encoder_backward(float* dwte, float* dwpe, const floatX* dout, const int* bucket_token,
                      const int* bucket_start, const int* bucket_pos, int num_buckets,
                      int B, int T, int C, cudaStream_t stream) {
    // dwte: (Vp,C) fp32, dwpe: (maxT,C) fp32, dout: (B,T,C)
    const int block = 256;
    encoder_backward_wpe_kernel<<<ceil_div((long)T * C, block), block, 0, stream>>>(dwpe, dout, B, T, C);
    cudaCheck(cudaGetLastError());
    dim3 grid(num_buckets, ceil_div(C, block));
    encoder_backward_wte_kernel<<<grid, block, 0, stream>>>(dwte, dout, bucket_token, bucket_start, bucket_pos, C);
    cudaCheck(cudaGetLastError());
}

#endif // LLMC_ENCODER_CUH

/*
 * llmc/cudnn_att.h — causal self-attention through cuDNN's fused flash-attention engine, driven by the
 * cuDNN 9 backend (graph) API directly: this machine has cuDNN but not the cudnn-frontend headers.
 * Implemented in llmc/cudnn_att.cpp, compiled on its own so that the rest of the trainer does not rebuild
 * with it, and linked only when the Makefile finds cuDNN (header cudnn.h and libcudnn) and USE_CUDNN is
 * not 0; train_gpt2.cu then defines ENABLE_CUDNN. Without it, llmc/attention.cuh is the attention.
 *
 * Same layouts and math as llmc/attention.cuh, the reference: q,k,v read in place from the qkv projection
 * (B,T,3C), out (B,T,C), scores q.k/sqrt(HS) under a causal mask, softmax, weighted sum of v; the forward
 * saves the softmax log-sum-exp per query, (B,NH,T) fp32, which the backward uses to recompute the
 * probabilities. bf16 inputs and outputs, fp32 accumulation (cuDNN's flash engines need 16-bit inputs, so
 * fp32 builds never use this path).
 *
 * The operation graphs (forward and backward) are built and their execution plans chosen once per shape
 * (B,T,NH,HS), at the first call for that shape (gpt2_allocate makes that call for the training shape, before
 * the first step), and cached; the workspace is one buffer grown only when a new shape needs more (plus, if
 * the chosen backward engine needs it, an fp32 dQ accumulator per shape). Steady-state
 * calls allocate nothing.
 */
#ifndef LLMC_CUDNN_ATT_H
#define LLMC_CUDNN_ATT_H

#include <stddef.h>
#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

// creates the cuDNN handle on the first call; every call (one per model) is matched by a cudnn_att_destroy
void cudnn_att_init(void);
// the last matching call frees the plans, the workspace and the handle
void cudnn_att_destroy(void);

// builds (or finds in the cache) the forward and backward plans for this shape; returns 0 on success, or
// -1 with a one-line reason in err when cuDNN has no engine for the graph (the caller then uses its own kernel)
int cudnn_att_prepare(int B, int T, int NH, int HS, char* err, size_t errlen);

// out: (B,T,C) bf16, lse: (B,NH,T) fp32, qkv: (B,T,3C) bf16
void cudnn_att_forward(void* out, float* lse, const void* qkv, int B, int T, int NH, int HS, cudaStream_t stream);
// dqkv: (B,T,3C) bf16, overwritten; delta: (B,NH,T) fp32 scratch (rowsum of dout*out); dout, out: (B,T,C) bf16;
// qkv: (B,T,3C) bf16; lse: (B,NH,T) fp32 from the forward
void cudnn_att_backward(void* dqkv, float* delta, const void* dout, const void* qkv, const void* out,
                        const float* lse, int B, int T, int NH, int HS, cudaStream_t stream);

// builds and finalizes the forward and backward operation graphs on the host only (no GPU, no handle, no
// engine): checks that every descriptor of both graphs (and of the backward with the dQ accumulator) is
// accepted by this cuDNN library and that each graph's memory tensors are exactly those its variant pack
// binds, after checking that the library refuses a matmul of mismatched shapes (else the check would be
// blind). 0 on success, else -1 and the first problem in err. Used by dev/cuda/cudnn_graph_check.cu.
int cudnn_att_check_graphs(int B, int T, int NH, int HS, char* err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif // LLMC_CUDNN_ATT_H

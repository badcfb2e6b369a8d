/*
 * hybrid/device.cuh — hybrid mode in the GPU trainer: the device buffers it needs (the parameter blocks,
 * the drift, a Predict step's coefficients, the look-ahead's betas, the update's statistics, and the
 * checkpoint's pinned staging) and the calls train_gpt2.cu makes around its step: a Predict step, a
 * Correct step's rollback, a measured step's fused AdamW update, and the hybrid file of a checkpoint.
 * hybrid/hybrid.h decides on the host, hybrid/apply.cuh's kernels apply; the numbers go from one to the
 * other here (drift_update_numbers in, the drift's statistics back), so the trainer reads and writes no field
 * of HybridState. The trainer's buffers come in as a HybridBuffers; the drift and AdamW's moments are
 * shard-local (ZeRO-1), the weights and gradients full length.
 */
#ifndef HYBRID_DEVICE_CUH
#define HYBRID_DEVICE_CUH

#include "llmc/cuda_common.cuh"
#include "llmc/adamw.cuh"
#include "llmc/zero.cuh"
#include "hybrid/apply.cuh"
#include "hybrid/run.h"

// the trainer's flat device buffers as hybrid mode reads and writes them
typedef struct {
    float* master;            // (padded) fp32 master weights
    floatX* params;           // (padded) their working copy
    float* grads;             // (padded) gradients: a Predict run's keep buffer, and gather space at checkpoints
    float* m;                 // (shard) AdamW's moments
    float* v;                 // (shard)
    size_t num_params;        // P
    size_t padded;            // P padded to a multiple of the processes
    size_t lo, shard;         // this rank's shard: [lo, lo + shard)
    const MultiGpuConfig* multi_gpu;
    cudaStream_t stream;
} HybridBuffers;

typedef struct {
    int nblocks;              // 12*L + 4 parameter blocks
    size_t* block_offsets;    // (nblocks+1) device, in floats
    float* block_wd;          // (nblocks) device, AdamW's weight decay of each block
    float* coef;              // (nblocks) device, this Predict step's coefficients
    float* la_beta;           // (2*nblocks) device, the look-ahead's beta_prev and beta_next
    double* stats;            // (nblocks*3) device, filled by the fused AdamW kernel
    double* stats_partial;    // (nblocks*HYBRID_GPU_CHUNKS*3) device
    float* drift;             // (shard) device, the drift: the EMA of the weights' displacement per step
    float* host_drift;        // (P) pinned, checkpoint staging of the drift
    float* host_keep;         // (P) pinned, checkpoint staging of the rollback buffer (open Predict run)
    // another method of the table (its row's device hooks): its buffers, full length like the weights
    float* bufs[HYBRID_MAX_BUFFERS];      // (padded) device
    float* host_bufs[HYBRID_MAX_BUFFERS]; // (P) pinned, checkpoint staging (the kept weights have none: the
                                          // trainer's checkpoint writes them as the model)
} HybridDevice;

// the step's numbers and buffers for a method's kernels (hybrid/method.h)
static HybridDeviceStep hybrid_device_step(HybridDevice* d, const HybridState* h, const HybridBuffers* b,
                                           float grad_scale, int t, uint32_t seed) {
    HybridDeviceStep s;
    s.master = b->master; s.params = b->params; s.grads = b->grads; s.m = b->m; s.v = b->v;
    s.bufs = d->bufs;
    s.block_offsets = d->block_offsets; s.block_wd = d->block_wd; s.nblocks = d->nblocks;
    s.lo = b->lo; s.hi = b->lo + b->shard;
    s.adam = hybrid_adam_step(h, grad_scale, t);
    s.adam.params16 = NULL;
    s.seed = seed;
    s.stream = (void*)b->stream;
    return s;
}

// the weights to evaluate and keep where the method keeps them apart (device, padded P), else NULL
static float* hybrid_device_kept(const HybridDevice* d, const HybridState* h) {
    return h->method->keeps_weights ? d->bufs[0] : NULL;
}

// the device side of an initialised HybridState (hybrid mode on)
static void hybrid_device_init(HybridDevice* d, const HybridState* h, const HybridBuffers* b) {
    const HybridMethod* m = h->method;
    if (!m->gpu || (!hybrid_is_drift(m) && (m->device_update == NULL || (m->predicts && m->device_predict == NULL)))) {
        fatal("flag --hybrid: method %s does not run on the GPU yet (./train_gpt2, the CPU trainer, runs it)", m->name);
    }
    memset(d, 0, sizeof(*d));
    int nb = d->nblocks = h->model.nblocks;
    const size_t* offsets = h->offsets;
    d->block_offsets = (size_t*)cudaMallocCheck((size_t)(nb + 1) * sizeof(size_t));
    d->block_wd = (float*)cudaMallocCheck((size_t)nb * sizeof(float));
    cudaCheck(cudaMemcpy(d->block_offsets, offsets, (size_t)(nb + 1) * sizeof(size_t), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(d->block_wd, h->weight_decay, (size_t)nb * sizeof(float), cudaMemcpyHostToDevice));
    if (!hybrid_is_drift(m)) {  // another method: its buffers, zeroed; kept weights start as the weights
        for (int k = 0; k < m->buffers; k++) {
            d->bufs[k] = (float*)cudaMallocCheck(b->padded * sizeof(float));
            cudaCheck(cudaMemset(d->bufs[k], 0, b->padded * sizeof(float)));
            if (k > 0 || !m->keeps_weights) { cudaCheck(cudaMallocHost((void**)&d->host_bufs[k], b->num_params * sizeof(float))); }
        }
        if (m->keeps_weights) {
            cudaCheck(cudaMemcpy(d->bufs[0], b->master, b->padded * sizeof(float), cudaMemcpyDeviceToDevice));
        }
        return;
    }
    d->coef = (float*)cudaMallocCheck((size_t)nb * sizeof(float));
    d->la_beta = (float*)cudaMallocCheck((size_t)nb * 2 * sizeof(float));
    d->stats = (double*)cudaMallocCheck((size_t)nb * 3 * sizeof(double));
    d->stats_partial = (double*)cudaMallocCheck((size_t)nb * HYBRID_GPU_CHUNKS * 3 * sizeof(double));
    d->drift = (float*)cudaMallocCheck(b->shard * sizeof(float));
    cudaCheck(cudaMemset(d->drift, 0, b->shard * sizeof(float)));
    cudaCheck(cudaMallocHost((void**)&d->host_drift, b->num_params * sizeof(float)));
    cudaCheck(cudaMallocHost((void**)&d->host_keep, b->num_params * sizeof(float)));
}

static void hybrid_device_free(HybridDevice* d) {
    if (d->block_offsets == NULL) { return; }
    void* dev[] = {d->block_offsets, d->block_wd, d->coef, d->la_beta, d->stats, d->stats_partial, d->drift, d->bufs[0],
                   d->bufs[1]};
    for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++) { if (dev[i] != NULL) { cudaCheck(cudaFree(dev[i])); } }
    void* host[] = {d->host_drift, d->host_keep, d->host_bufs[0], d->host_bufs[1]};
    for (size_t i = 0; i < sizeof(host) / sizeof(host[0]); i++) { if (host[i] != NULL) { cudaCheck(cudaFreeHost(host[i])); } }
    memset(d, 0, sizeof(*d));
}

// with ZeRO-1, every rank's shard of the working weights to every rank
static void hybrid_device_gather_params(const HybridBuffers* b) {
    if (b->multi_gpu->zero_stage == 1) {
        multi_gpu_all_gather(b->params, b->padded, sizeof(floatX), b->multi_gpu, b->stream);
    }
}

// a Predict step (the plan's): theta += coef_b * d_b along the drift on this rank's shard; the run's first
// step keeps theta_0 in the gradient buffer. seed: the floatX rounding's.
static void hybrid_device_predict(HybridDevice* d, HybridState* h, const HybridPlan* p, const HybridBuffers* b,
                                  uint32_t seed) {
    if (!hybrid_is_drift(h->method)) {  // another method's step without a batch
        HybridDeviceStep s = hybrid_device_step(d, h, b, 1.0f, 0, seed);
        h->method->device_predict(h->self, &s);
        hybrid_device_gather_params(b);  // on the stream: nothing comes back to the host, so no wait
        return;
    }
    cudaCheck(cudaMemcpyAsync(d->coef, p->coef, (size_t)d->nblocks * sizeof(float), cudaMemcpyHostToDevice, b->stream));
    hybrid_predict(b->master, b->params, b->grads, d->drift, d->block_offsets, d->nblocks, d->coef, b->lo,
                   b->lo + b->shard, p->keep, seed, b->stream);
    hybrid_device_gather_params(b);
    cudaCheck(cudaStreamSynchronize(b->stream));
}

// a Correct step's rollback: the weights from before the Predict run, from the gradient buffer, bit-exactly
static void hybrid_device_rollback(const HybridBuffers* b, uint32_t seed) {
    hybrid_rollback_device(b->master, b->params, b->grads, b->lo, b->lo + b->shard, seed, b->stream);
    hybrid_device_gather_params(b);
}

// a measured step's AdamW update: the same update as the plain kernel, fused with the drift, the look-ahead
// and the per-block statistics in one kernel on this rank's shard (the padding after the last tensor has no
// block: plain AdamW); the statistics, summed over ranks, go back to the host state for hybrid_observe.
// t: AdamW's step (1-based); seed: the floatX rounding's.
static void hybrid_device_update(HybridDevice* d, HybridState* h, const HybridBuffers* b, float grad_scale, int t,
                                 uint32_t seed) {
    if (!hybrid_is_drift(h->method)) {  // another method's pass (the padding gets its elements too)
        HybridDeviceStep s = hybrid_device_step(d, h, b, grad_scale, t, seed);
        h->method->device_update(h->self, &s);
        hybrid_device_gather_params(b);  // on the stream: nothing comes back to the host, so no wait
        return;
    }
    Drift* dr = hybrid_drift(h);
    HybridUpdate u = drift_update_numbers(dr, h->lr, grad_scale, t);
    ApplyAdamStep st = u.adam;
    st.weight_decay = d->block_wd;
    hybrid_step_ema(h, &st, t);  // the trainer's EMA (device memory), folded in the same kernel
    size_t lo = b->lo, hi = b->lo + b->shard;
    // the look-ahead's betas, as hybrid_plan decided them (hybrid/lookahead.h)
    cudaCheck(cudaMemcpyAsync(d->la_beta, u.beta_prev, (size_t)d->nblocks * sizeof(float), cudaMemcpyHostToDevice, b->stream));
    cudaCheck(cudaMemcpyAsync(d->la_beta + d->nblocks, u.beta_next, (size_t)d->nblocks * sizeof(float), cudaMemcpyHostToDevice, b->stream));
    hybrid_adamw_lookahead_device(d->stats, d->stats_partial, b->master, b->params, b->grads, b->m, b->v, d->drift, &st,
                                  u.gamma, d->la_beta, d->block_offsets, d->nblocks, lo, hi, seed, b->stream);
    size_t pad = u.num_params > lo ? u.num_params : lo;
    if (pad < hi) {
        adamw_update(b->master + pad, b->params + pad, b->grads + pad, b->m + (pad - lo), b->v + (pad - lo), hi - pad, pad,
                     st.lr, st.beta1, st.beta2, t, st.eps, 0.0f, grad_scale, seed, b->stream);
    }
    hybrid_device_gather_params(b);
#ifdef MULTI_GPU
    if (b->multi_gpu->zero_stage == 1) {
        ncclCheck(ncclAllReduce(d->stats, d->stats, (size_t)d->nblocks * 3, ncclDouble, ncclSum,
                                b->multi_gpu->nccl_comm, b->stream));
    }
#endif
    cudaCheck(cudaMemcpyAsync(dr->stats, d->stats, (size_t)d->nblocks * 3 * sizeof(double),
                              cudaMemcpyDeviceToHost, b->stream));
    cudaCheck(cudaStreamSynchronize(b->stream));
}

// ----------------------------------------------------------------------------
// checkpoints. Every rank takes part in the gathers (through the gradient buffer, idle between an update
// and the next zero_grad); rank 0 writes.

// this rank's part of the parameters that are real (not padding): [lo, lo + own)
static size_t hybrid_device_own(const HybridBuffers* b) {
    size_t P = b->num_params, lo = b->lo;
    return lo >= P ? 0 : (lo + b->shard <= P ? b->shard : P - lo);
}

// the drift and an open Predict run's rollback point to the pinned host copies (every rank); the trainer
// may then gather its own state through the gradient buffer, and calls hybrid_device_checkpoint_done
static void hybrid_device_checkpoint_stage(HybridDevice* d, const HybridState* h, const HybridBuffers* b) {
    size_t P = b->num_params;
    if (!hybrid_is_drift(h->method)) {  // another method's buffers, each rank's range gathered, to the host
        for (int k = 0; k < h->method->buffers; k++) {
            if (d->host_bufs[k] == NULL) { continue; }  // the kept weights: the trainer's checkpoint writes them
            multi_gpu_all_gather(d->bufs[k], b->padded, sizeof(float), b->multi_gpu, b->stream);
            cudaCheck(cudaMemcpyAsync(d->host_bufs[k], d->bufs[k], P * sizeof(float), cudaMemcpyDeviceToHost, b->stream));
        }
        return;
    }
    int zero1 = b->multi_gpu->zero_stage == 1;
    if (hybrid_run_open(h)) {  // the rollback point (in the gradient buffer, sharded like the weights)
        multi_gpu_all_gather(b->grads, b->padded, sizeof(float), b->multi_gpu, b->stream);
        cudaCheck(cudaMemcpyAsync(d->host_keep, b->grads, P * sizeof(float), cudaMemcpyDeviceToHost, b->stream));
    }
    const float* full = d->drift;  // shard-local
    if (zero1) {
        cudaCheck(cudaMemcpyAsync(b->grads + b->lo, d->drift, b->shard * sizeof(float), cudaMemcpyDeviceToDevice, b->stream));
        multi_gpu_all_gather(b->grads, b->padded, sizeof(float), b->multi_gpu, b->stream);
        full = b->grads;
    }
    cudaCheck(cudaMemcpyAsync(d->host_drift, full, P * sizeof(float), cudaMemcpyDeviceToHost, b->stream));
}

// after the trainer's own gathers: the gathers went through the gradient buffer, so an open Predict run's
// rollback point goes back into this rank's shard of it
static void hybrid_device_checkpoint_done(HybridDevice* d, const HybridState* h, const HybridBuffers* b) {
    if (hybrid_run_open(h) && b->multi_gpu->zero_stage == 1) {
        cudaCheck(cudaMemcpyAsync(b->grads + b->lo, d->host_keep + b->lo, hybrid_device_own(b) * sizeof(float),
                                  cudaMemcpyHostToDevice, b->stream));
    }
    cudaCheck(cudaStreamSynchronize(b->stream));
}

// hybrid_%08d.bin of this step from the staged copies (rank 0)
static void hybrid_device_checkpoint_write(HybridDevice* d, HybridState* h, const TrainRun* run) {
    hybrid_checkpoint_write(h, run, hybrid_is_drift(h->method) ? &d->host_drift : d->host_bufs,
                            hybrid_run_open(h) ? d->host_keep : NULL);
}

// checkpoint `step`'s hybrid file onto the device: the drift, and an open Predict run's rollback point
// into the gradient buffer
static void hybrid_device_load(HybridDevice* d, HybridState* h, const TrainRun* run, int step, const HybridBuffers* b) {
    if (!hybrid_is_drift(h->method)) {  // another method's buffers (the kept weights come with the trainer's files)
        hybrid_checkpoint_load(h, run, step, d->host_bufs, NULL);
        for (int k = 0; k < h->method->buffers; k++) {
            if (d->host_bufs[k] == NULL) { continue; }
            cudaCheck(cudaMemcpy(d->bufs[k], d->host_bufs[k], b->num_params * sizeof(float), cudaMemcpyHostToDevice));
        }
        return;
    }
    hybrid_checkpoint_load(h, run, step, &d->host_drift, d->host_keep);
    size_t own = hybrid_device_own(b);
    cudaCheck(cudaMemset(d->drift, 0, b->shard * sizeof(float)));
    cudaCheck(cudaMemcpy(d->drift, d->host_drift + b->lo, own * sizeof(float), cudaMemcpyHostToDevice));
    if (hybrid_run_open(h)) {
        cudaCheck(cudaMemcpy(b->grads + b->lo, d->host_keep + b->lo, own * sizeof(float), cudaMemcpyHostToDevice));
    }
}

#endif // HYBRID_DEVICE_CUH

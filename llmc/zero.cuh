/*
 * llmc/zero.cuh — multi-GPU: one process per GPU, gradients averaged with NCCL, ZeRO-1 sharding.
 * The NCCL unique id travels from rank 0 to the others through MPI (built with USE_MPI=1), a shared
 * file system (-pi fs -pf DIR) or TCP (-pi tcp -ps SERVER_IP). Without NCCL (MULTI_GPU undefined) only
 * one process is allowed.
 * ZeRO-1 (-z 1): gradients are reduce-scattered, each rank keeps the AdamW state of its 1/N shard and
 * updates that shard, then the floatX weights are all-gathered. Stage 0: gradients are all-reduced and
 * every rank updates everything. Shards are padded so that every rank's shard has the same length.
 */
#ifndef LLMC_ZERO_CUH
#define LLMC_ZERO_CUH

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>
#include "llmc/cuda_common.cuh"
#ifdef MULTI_GPU
#include <nccl.h>
#endif
#ifdef USE_MPI
#include <mpi.h>
#endif

typedef struct {
    int process_rank;      // 0 .. num_processes-1
    int num_processes;
    int local_device_idx;  // which GPU of this node
    int zero_stage;        // 0 or 1
    int mpi_initialized;   // MPI_Init was called (-pi mpi in a USE_MPI build): MPI_Finalize only then
#ifdef MULTI_GPU
    ncclComm_t nccl_comm;
#endif
} MultiGpuConfig;

#ifdef MULTI_GPU
static inline void nccl_check(ncclResult_t r, const char* file, int line) {
    if (r != ncclSuccess) { fatal("NCCL: %s [%s:%d]", ncclGetErrorString(r), file, line); }
}
#define ncclCheck(r) nccl_check((r), __FILE__, __LINE__)

#define NCCL_TCP_PORT 12345

// rank 0 accepts num_processes-1 connections and sends the id to each; the others connect and receive
static void nccl_id_tcp(ncclUniqueId* id, int rank, int num_processes, const char* server_ip) {
    if (rank == 0) {
        int srv = socket(AF_INET, SOCK_STREAM, 0);
        if (srv < 0) { fatal("tcp init: socket: %s", strerror(errno)); }
        int one = 1;
        setsockopt(srv, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        struct sockaddr_in addr;
        memset(&addr, 0, sizeof(addr));
        addr.sin_family = AF_INET;
        addr.sin_port = htons(NCCL_TCP_PORT);
        if (inet_pton(AF_INET, server_ip, &addr.sin_addr) != 1) { fatal("tcp init: bad server ip '%s'", server_ip); }
        if (bind(srv, (struct sockaddr*)&addr, sizeof(addr)) < 0) { fatal("tcp init: bind %s:%d: %s", server_ip, NCCL_TCP_PORT, strerror(errno)); }
        if (listen(srv, num_processes) < 0) { fatal("tcp init: listen: %s", strerror(errno)); }
        for (int i = 1; i < num_processes; i++) {
            int c = accept(srv, NULL, NULL);
            if (c < 0) { fatal("tcp init: accept: %s", strerror(errno)); }
            if (send(c, id, sizeof(*id), 0) != (ssize_t)sizeof(*id)) { fatal("tcp init: send: %s", strerror(errno)); }
            close(c);
        }
        close(srv);
    } else {
        struct sockaddr_in addr;
        memset(&addr, 0, sizeof(addr));
        addr.sin_family = AF_INET;
        addr.sin_port = htons(NCCL_TCP_PORT);
        if (inet_pton(AF_INET, server_ip, &addr.sin_addr) != 1) { fatal("tcp init: bad server ip '%s'", server_ip); }
        for (int attempt = 0;; attempt++) {  // the server may not be listening yet: retry for a minute
            int c = socket(AF_INET, SOCK_STREAM, 0);
            if (c < 0) { fatal("tcp init: socket: %s", strerror(errno)); }
            if (connect(c, (struct sockaddr*)&addr, sizeof(addr)) == 0) {
                size_t got = 0;
                while (got < sizeof(*id)) {
                    ssize_t r = recv(c, (char*)id + got, sizeof(*id) - got, 0);
                    if (r <= 0) { fatal("tcp init: recv from %s: %s", server_ip, r == 0 ? "closed" : strerror(errno)); }
                    got += (size_t)r;
                }
                close(c);
                return;
            }
            close(c);
            if (attempt >= 600) { fatal("tcp init: cannot connect to %s:%d", server_ip, NCCL_TCP_PORT); }
            usleep(100000);
        }
    }
}

// rank 0 writes DIR/ncclUniqueId.bin atomically; the others wait for it. Remove it between runs.
static void nccl_id_fs(ncclUniqueId* id, int rank, const char* dir) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/ncclUniqueId.bin", dir);
    if (rank == 0) {
        AtomicFile af;
        atomic_open(&af, path);
        atomic_write(&af, id, sizeof(*id), 1);
        atomic_commit(&af);
        return;
    }
    for (int attempt = 0;; attempt++) {
        FILE* f = fopen(path, "rb");
        if (f != NULL) {
            freadCheck(id, sizeof(*id), 1, f, path);
            fcloseCheck(f, path);
            return;
        }
        if (attempt >= 600) { fatal("%s: not written by rank 0 within a minute", path); }
        usleep(100000);
    }
}
#endif

// init_method: "mpi", "tcp" or "fs"; with one process nothing is initialised
MultiGpuConfig multi_gpu_config_init(int num_processes, int process_rank, int gpus_per_node,
                                     const char* init_method, const char* fs_path, const char* server_ip,
                                     int zero_stage) {
    MultiGpuConfig cfg;
    memset(&cfg, 0, sizeof(cfg));
#ifdef USE_MPI
    if (strcmp(init_method, "mpi") == 0) {
        MPI_Init(NULL, NULL);
        cfg.mpi_initialized = 1;
        MPI_Comm_rank(MPI_COMM_WORLD, &process_rank);
        MPI_Comm_size(MPI_COMM_WORLD, &num_processes);
    }
#else
    if (strcmp(init_method, "mpi") == 0 && num_processes > 1) {
        fatal("-pi mpi: this binary was built without MPI (make USE_MPI=1), use -pi fs or -pi tcp");
    }
#endif
    if (num_processes < 1 || process_rank < 0 || process_rank >= num_processes) {
        fatal("bad process layout: rank %d of %d", process_rank, num_processes);
    }
    cfg.num_processes = num_processes;
    cfg.process_rank = process_rank;
    cfg.local_device_idx = process_rank % gpus_per_node;
    cfg.zero_stage = num_processes > 1 ? zero_stage : 0;
#ifdef MULTI_GPU
    cudaCheck(cudaSetDevice(cfg.local_device_idx));
    if (num_processes > 1) {
        ncclUniqueId id;
        if (process_rank == 0) { ncclCheck(ncclGetUniqueId(&id)); }
        if (strcmp(init_method, "tcp") == 0) {
            nccl_id_tcp(&id, process_rank, num_processes, server_ip);
        } else if (strcmp(init_method, "fs") == 0) {
            nccl_id_fs(&id, process_rank, fs_path);
#ifdef USE_MPI
        } else if (strcmp(init_method, "mpi") == 0) {
            MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
#endif
        } else {
            fatal("flag -pi: unknown init method '%s' (mpi, tcp or fs)", init_method);
        }
        ncclCheck(ncclCommInitRank(&cfg.nccl_comm, num_processes, id, process_rank));
    }
#else
    (void)fs_path; (void)server_ip;
    if (num_processes > 1) { fatal("%d processes requested but this binary was built without NCCL", num_processes); }
    cudaCheck(cudaSetDevice(cfg.local_device_idx));
#endif
    return cfg;
}

void multi_gpu_config_free(MultiGpuConfig* cfg) {
#ifdef MULTI_GPU
    if (cfg->num_processes > 1) { ncclCheck(ncclCommDestroy(cfg->nccl_comm)); }
#endif
#ifdef USE_MPI
    if (cfg->mpi_initialized) { MPI_Finalize(); }
#endif
    (void)cfg;
}

// gradient averaging. Stage 0: all-reduce all n. Stage 1: reduce-scatter, rank r's average lands in
// grads[r*shard .. (r+1)*shard) (n = shard * num_processes). No-op with one process.
void multi_gpu_reduce_grads(float* grads, size_t n, const MultiGpuConfig* cfg, cudaStream_t stream) {
#ifdef MULTI_GPU
    if (cfg->num_processes == 1) { return; }
    if (cfg->zero_stage == 0) {
        ncclCheck(ncclAllReduce(grads, grads, n, ncclFloat, ncclAvg, cfg->nccl_comm, stream));
    } else {
        size_t shard = n / cfg->num_processes;
        ncclCheck(ncclReduceScatter(grads, grads + cfg->process_rank * shard, shard, ncclFloat, ncclAvg,
                                    cfg->nccl_comm, stream));
    }
#else
    (void)grads; (void)n; (void)cfg; (void)stream;
#endif
}

// sum one float (on the device) over all ranks, in place
void multi_gpu_sum_scalar(float* x, const MultiGpuConfig* cfg, cudaStream_t stream) {
#ifdef MULTI_GPU
    if (cfg->num_processes > 1) {
        ncclCheck(ncclAllReduce(x, x, 1, ncclFloat, ncclSum, cfg->nccl_comm, stream));
    }
#else
    (void)x; (void)cfg; (void)stream;
#endif
}

// every rank gets every shard: buf holds n = shard * num_processes elements of `bytes_per` bytes
void multi_gpu_all_gather(void* buf, size_t n, size_t bytes_per, const MultiGpuConfig* cfg, cudaStream_t stream) {
#ifdef MULTI_GPU
    if (cfg->num_processes == 1) { return; }
    size_t shard_bytes = n / cfg->num_processes * bytes_per;
    char* base = (char*)buf;
    ncclCheck(ncclAllGather(base + cfg->process_rank * shard_bytes, base, shard_bytes, ncclChar,
                            cfg->nccl_comm, stream));
#else
    (void)buf; (void)n; (void)bytes_per; (void)cfg; (void)stream;
#endif
}

#endif // LLMC_ZERO_CUH

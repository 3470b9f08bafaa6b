// A small native CUDA program shaped like a server's decode loop, for the CUPTI injection sample.
//
// Why: under CUDA_INJECTION64_PATH a PyTorch process on the H200 hit CUPTI_ERROR_OUT_OF_MEMORY
// in cupti_trace_injection and lost its records (see README.md); llama-server, a native program,
// traced fine. This program gives the same kinds of records a native server does: per step, an
// HtoD copy of the token, a memset, per layer an RMS-norm, a GEMV over bf16-sized weights, an
// "attention" read of a KV slice and a residual add, then a DtoH copy and a sync; first
// launched one by one (cudaLaunchKernel), then captured once into a CUDA graph and replayed
// (cudaGraphLaunch: kernels carry graphId/graphNodeId, as llama.cpp's do).
//
// Build: nvcc -O2 -arch=sm_90 -o cupti_decode_like cupti_decode_like.cu
// Run:   ./cupti_decode_like [eager_steps] [graph_steps]     (timings go to stderr)
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                         \
    do {                                                                              \
        cudaError_t e_ = (x);                                                         \
        if (e_ != cudaSuccess) {                                                      \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)

constexpr int H = 2048;       // hidden size
constexpr int LAYERS = 8;     // layers per step
constexpr int KV = 1024 * 64; // KV elements read per layer

__global__ void embed(const int* tok, const float* table, float* x) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < H) x[i] = table[(tok[0] % 1024) * H + i];
}

__global__ void rmsnorm(const float* x, float* y) {
    __shared__ float s[256];
    float acc = 0.f;
    for (int i = threadIdx.x; i < H; i += blockDim.x) acc += x[i] * x[i];
    s[threadIdx.x] = acc;
    __syncthreads();
    for (int o = blockDim.x / 2; o > 0; o >>= 1) {
        if (threadIdx.x < o) s[threadIdx.x] += s[threadIdx.x + o];
        __syncthreads();
    }
    float r = rsqrtf(s[0] / H + 1e-5f);
    for (int i = threadIdx.x; i < H; i += blockDim.x) y[i] = x[i] * r;
}

__global__ void gemv(const float* w, const float* x, float* y) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= H) return;
    float acc = 0.f;
    for (int i = lane; i < H; i += 32) acc += w[(size_t)row * H + i] * x[i];
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffff, acc, o);
    if (lane == 0) y[row] = acc;
}

__global__ void attn_read(const float* kv, const float* q, float* out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float acc = 0.f;
    for (int j = i; j < KV; j += gridDim.x * blockDim.x) acc += kv[j] * q[j % H];
    if (i < H) out[i] = acc;
}

__global__ void add(float* x, const float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < H) x[i] += 1e-3f * y[i];
}

__global__ void argmax_tok(const float* x, int* tok) {
    if (threadIdx.x == 0) {
        int best = 0;
        for (int i = 1; i < H; ++i) if (x[i] > x[best]) best = i;
        tok[0] = best;
    }
}

struct Bufs {
    float *table, *w, *kv, *x, *y, *z;
    int* tok;
    int* htok;
};

static void step(const Bufs& b, cudaStream_t s) {
    CK(cudaMemcpyAsync(b.tok, b.htok, sizeof(int), cudaMemcpyHostToDevice, s));
    CK(cudaMemsetAsync(b.z, 0, H * sizeof(float), s));
    embed<<<H / 256, 256, 0, s>>>(b.tok, b.table, b.x);
    for (int l = 0; l < LAYERS; ++l) {
        rmsnorm<<<1, 256, 0, s>>>(b.x, b.y);
        gemv<<<H / 8, 256, 0, s>>>(b.w + (size_t)l * H * H, b.y, b.z);
        attn_read<<<64, 256, 0, s>>>(b.kv + (size_t)l * KV, b.z, b.y);
        add<<<H / 256, 256, 0, s>>>(b.x, b.y);
    }
    argmax_tok<<<1, 32, 0, s>>>(b.x, b.tok);
    CK(cudaMemcpyAsync(b.htok, b.tok, sizeof(int), cudaMemcpyDeviceToHost, s));
}

int main(int argc, char** argv) {
    int eager = argc > 1 ? atoi(argv[1]) : 8;
    int graphed = argc > 2 ? atoi(argv[2]) : 8;
    Bufs b{};
    CK(cudaMalloc(&b.table, sizeof(float) * 1024 * H));
    CK(cudaMalloc(&b.w, sizeof(float) * (size_t)LAYERS * H * H));
    CK(cudaMalloc(&b.kv, sizeof(float) * (size_t)LAYERS * KV));
    CK(cudaMalloc(&b.x, sizeof(float) * H));
    CK(cudaMalloc(&b.y, sizeof(float) * H));
    CK(cudaMalloc(&b.z, sizeof(float) * H));
    CK(cudaMalloc(&b.tok, sizeof(int)));
    CK(cudaMallocHost(&b.htok, sizeof(int)));
    CK(cudaMemset(b.table, 0, sizeof(float) * 1024 * H));
    CK(cudaMemset(b.w, 0, sizeof(float) * (size_t)LAYERS * H * H));
    CK(cudaMemset(b.kv, 0, sizeof(float) * (size_t)LAYERS * KV));
    std::vector<float> host(H, 0.5f);
    CK(cudaMemcpy(b.table, host.data(), sizeof(float) * H, cudaMemcpyHostToDevice));
    *b.htok = 1;
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    auto ms = [](auto a, auto c) { return std::chrono::duration<double, std::milli>(c - a).count(); };
    for (int i = 0; i < eager; ++i) {
        auto t0 = std::chrono::steady_clock::now();
        step(b, s);
        CK(cudaStreamSynchronize(s));
        fprintf(stderr, "eager step %d: %.3f ms\n", i, ms(t0, std::chrono::steady_clock::now()));
    }
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    step(b, s);
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    for (int i = 0; i < graphed; ++i) {
        auto t0 = std::chrono::steady_clock::now();
        CK(cudaGraphLaunch(ge, s));
        CK(cudaStreamSynchronize(s));
        fprintf(stderr, "graph step %d: %.3f ms\n", i, ms(t0, std::chrono::steady_clock::now()));
    }
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    CK(cudaStreamDestroy(s));
    fprintf(stderr, "done: %d eager + %d graph steps, token %d\n", eager, graphed, *b.htok);
    return 0;
}

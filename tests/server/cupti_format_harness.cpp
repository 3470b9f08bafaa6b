// Test harness for perflib's CUPTI library without a GPU (tests/server/test_cupti_library.py): it includes
// the library's source, so that its own `format` prints records made up here with known fields, and its
// own `write_stats` writes their counts. Usage: harness RECORDS_PATH STATS_PATH
#include PERFLIB_CUPTI_SOURCE

#include <cupti_driver_cbid.h>
#include <cupti_runtime_cbid.h>

namespace {

const uint64_t T = 1800000000000000000ull;  // Unix ns

void kernel(Out& out, const char* name, uint64_t start, uint64_t end, uint32_t stream, uint32_t graph,
            uint64_t node, uint32_t correlation) {
    CUpti_ActivityKernel10 k{};
    k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    k.name = name;
    k.start = start;
    k.end = end;
    k.deviceId = 0;
    k.contextId = 1;
    k.streamId = stream;
    k.graphId = graph;
    k.graphNodeId = node;
    k.correlationId = correlation;
    k.gridX = 128; k.gridY = 1; k.gridZ = 1;
    k.blockX = 256; k.blockY = 1; k.blockZ = 1;
    k.channelType = CUPTI_CHANNEL_TYPE_COMPUTE;
    format(out, reinterpret_cast<CUpti_Activity*>(&k));
}

void api(Out& out, CUpti_ActivityKind kind, uint32_t cbid, uint64_t start, uint64_t end, uint32_t correlation) {
    CUpti_ActivityAPI a{};
    a.kind = kind;
    a.cbid = cbid;
    a.start = start;
    a.end = end;
    a.processId = 4242;
    a.threadId = 4243;
    a.correlationId = correlation;
    format(out, reinterpret_cast<CUpti_Activity*>(&a));
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3) return 2;
    g = new State();
    g->settings.output = argv[1];
    g->settings.stats = argv[2];
    g->fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (g->fd < 0) return 3;
    Out out(1 << 20);
    out.s("perflib-cupti 1: a made-up capture\n");
    api(out, CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, T, T + 2500, 11);
    kernel(out, "_Z6scale2Pfi", T + 3000, T + 8000, 7, 0, 0, 11);
    api(out, CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, T + 9000, T + 9400, 12);
    kernel(out, "flash_attn_ext_f16", T + 10000, T + 30000, 13, 3, 77, 12);
    kernel(out, "lost_timestamps", 0, 0, 13, 3, 78, 12);  // not written: counted as dropped

    CUpti_ActivityMemcpy6 m{};
    m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
    m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
    m.srcKind = CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE;
    m.dstKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
    m.bytes = 4;
    m.copyCount = 1;
    m.start = T + 31000;
    m.end = T + 32000;
    m.contextId = 1;
    m.streamId = 13;
    m.graphId = 3;
    m.graphNodeId = 79;
    m.correlationId = 12;
    m.channelType = CUPTI_CHANNEL_TYPE_ASYNC_MEMCPY;
    format(out, reinterpret_cast<CUpti_Activity*>(&m));

    CUpti_ActivityMemset4 s{};
    s.kind = CUPTI_ACTIVITY_KIND_MEMSET;
    s.bytes = 8192;
    s.start = T + 33000;
    s.end = T + 33500;
    s.contextId = 1;
    s.streamId = 7;
    s.correlationId = 13;
    s.channelType = CUPTI_CHANNEL_TYPE_COMPUTE;
    format(out, reinterpret_cast<CUpti_Activity*>(&s));

    CUpti_ActivityOverhead3 o{};
    o.kind = CUPTI_ACTIVITY_KIND_OVERHEAD;
    o.overheadKind = CUPTI_ACTIVITY_OVERHEAD_CUPTI_BUFFER_FLUSH;
    o.objectKind = CUPTI_ACTIVITY_OBJECT_THREAD;
    o.objectId.pt.threadId = 4243;
    o.start = T + 34000;
    o.end = T + 35000;
    format(out, reinterpret_cast<CUpti_Activity*>(&o));

    out.flush();
    g->buffers.store(1);
    write_stats();
    return 0;
}

// perflib's CUPTI injection library: the activity records of any CUDA program, written to a file in the
// text that the CUDA sample `cupti_trace_injection` prints (perflib/traces/cupti_text.py reads it), without
// losing them over a long server life.
//
// Use: CUDA_INJECTION64_PATH=libperflib_cupti.so PERFLIB_CUPTI_OUTPUT=cupti.txt <program>
// (`perflib server cupti` builds it; a campaign's `profiler: {kind: cupti}` sets the variables).
//
// Why not the sample: it prints from CUPTI's thread onto the program's stdout (where the server's own
// output lands inside record lines), exits the process on the first CUPTI error (on the H200 a
// graph-replaying program died that way, CUPTI_ERROR_OUT_OF_MEMORY, and every record it held was lost),
// and has no count of what CUPTI dropped. Here:
// - records go to their own file (PERFLIB_CUPTI_OUTPUT, opened O_APPEND and written in whole records, so
//   two processes that share the file interleave whole records at worst);
// - host activity buffers (PERFLIB_CUPTI_BUFFER_MB, default 16 MiB) come from a pool that grows up to
//   PERFLIB_CUPTI_MAX_BUFFERS (default 256) and is refilled as the writer thread empties them: CUPTI's
//   own thread only hands a buffer over, it never waits on formatting or the disk;
// - the device buffers CUPTI keeps the kernels' timestamps in are raised (PERFLIB_CUPTI_DEVICE_BUFFER_MB,
//   default 32 MiB each; PERFLIB_CUPTI_DEVICE_POOL_LIMIT, default 1000 buffers), as the CUPTI docs advise
//   for programs that launch many kernels or replay CUDA graphs;
// - a flusher thread asks CUPTI for its completed records every PERFLIB_CUPTI_FLUSH_MS (default 1000;
//   cuptiActivityFlushPeriod as well) and rewrites the stats file; at exit (atexit, or SIGTERM/SIGINT where
//   the program left them to their default action) a forced flush, the last buffers written, then the
//   stats with "complete": true;
// - cuptiActivityGetNumDroppedRecords is read for every buffer, every context and every stream CUPTI
//   reports, and written, with every CUPTI error, to PERFLIB_CUPTI_STATS (default: `cupti-stats.json`
//   beside the output): {"records", "dropped_records", "buffers", "flushes", "errors", "complete", ...}.
//   A CUPTI error is recorded and tracing goes on; it never ends the program.
// - PERFLIB_CUPTI_KINDS: the record kinds, comma-separated, of kernel, memcpy, memset, runtime, driver,
//   overhead (default all of them).
//
// A record whose GPU timestamps CUPTI could not take (start 0, or end before start: no device buffer
// space) is not written (it would sit at time 0) and counts as dropped ("timestamps_missing").
//
// Build: nvcc -O2 -std=c++17 -Xcompiler -fPIC,-fvisibility=hidden -shared -I$CUDA/include
//        -o libperflib_cupti.so perflib_cupti.cpp -L$CUDA/lib64 -lcupti -lpthread

#include <cuda.h>
#include <cupti.h>

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <condition_variable>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#define PERFLIB_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

constexpr int kVersion = 1;
constexpr size_t kAlign = 8;

// ------------------------------------------------------------------------------------------- settings

size_t env_size(const char* name, size_t fallback, size_t lo, size_t hi) {
    const char* text = getenv(name);
    if (text == nullptr || *text == '\0') return fallback;
    char* end = nullptr;
    unsigned long long value = strtoull(text, &end, 10);
    if (end == text || *end != '\0' || value < lo || value > hi) {
        fprintf(stderr, "perflib-cupti: %s=%s is not a whole number in [%zu, %zu]; using %zu\n", name, text, lo,
                hi, fallback);
        return fallback;
    }
    return static_cast<size_t>(value);
}

struct Settings {
    std::string output;
    std::string stats;
    size_t buffer_bytes = 16u << 20;
    size_t max_buffers = 256;
    size_t device_buffer_bytes = 32u << 20;
    size_t device_pool_limit = 1000;
    unsigned flush_ms = 1000;
    bool kernel = true, memcpy = true, memset = true, runtime = true, driver = true, overhead = true;
};

Settings read_settings() {
    Settings s;
    const char* out = getenv("PERFLIB_CUPTI_OUTPUT");
    const char* stats = getenv("PERFLIB_CUPTI_STATS");
    std::string mine = "perflib-cupti-" + std::to_string(getpid());
    s.output = (out && *out) ? out : mine + ".txt";
    if (stats && *stats) {
        s.stats = stats;
    } else if (out && *out) {
        size_t slash = s.output.rfind('/');
        s.stats = (slash == std::string::npos ? std::string() : s.output.substr(0, slash + 1)) + "cupti-stats.json";
    } else {
        s.stats = mine + "-stats.json";
    }
    s.buffer_bytes = env_size("PERFLIB_CUPTI_BUFFER_MB", 16, 1, 1024) << 20;
    s.max_buffers = env_size("PERFLIB_CUPTI_MAX_BUFFERS", 256, 2, 1 << 20);
    s.device_buffer_bytes = env_size("PERFLIB_CUPTI_DEVICE_BUFFER_MB", 32, 1, 4096) << 20;
    s.device_pool_limit = env_size("PERFLIB_CUPTI_DEVICE_POOL_LIMIT", 1000, 4, 1 << 20);
    s.flush_ms = static_cast<unsigned>(env_size("PERFLIB_CUPTI_FLUSH_MS", 1000, 10, 3600 * 1000));
    const char* kinds = getenv("PERFLIB_CUPTI_KINDS");
    if (kinds && *kinds) {
        std::string k = std::string(",") + kinds + ",";
        auto has = [&](const char* name) { return k.find(std::string(",") + name + ",") != std::string::npos; };
        s.kernel = has("kernel");
        s.memcpy = has("memcpy");
        s.memset = has("memset");
        s.runtime = has("runtime");
        s.driver = has("driver");
        s.overhead = has("overhead");
    }
    return s;
}

// ---------------------------------------------------------------------------------------------- state

struct Filled {
    uint8_t* data;
    size_t valid;
};

struct State {
    Settings settings;
    int fd = -1;
    pid_t pid = 0;                       // the process that set this up (a forked child has none of it)
    uint64_t started_ns = 0;

    std::mutex pool_mu;                  // the free host buffers
    std::vector<uint8_t*> free_buffers;
    size_t allocated = 0;

    std::mutex queue_mu;                 // filled buffers waiting for the writer
    std::condition_variable queue_cv;
    std::deque<Filled> queue;
    bool writer_stop = false;
    size_t writing = 0;                  // buffers the writer holds (for "drained")

    std::mutex names_mu;                 // kernel names, copied: CUPTI's pointers may not outlive a module
    std::unordered_map<const char*, const char*> names;

    std::mutex error_mu;
    std::map<std::string, uint64_t> errors;

    std::mutex resource_mu;              // contexts and streams, for their dropped-record counts
    std::set<CUcontext> contexts;
    std::set<std::pair<CUcontext, uint32_t>> streams;

    std::atomic<uint64_t> records{0}, buffers{0}, flushes{0}, dropped_cupti{0}, timestamps_missing{0};
    std::atomic<uint64_t> declined{0}, write_failures{0}, bytes_written{0};
    std::atomic<uint64_t> by_kind[6] = {};  // kernel, memcpy, memset, runtime, driver, overhead
    std::atomic<bool> complete{false}, finishing{false};
    std::atomic<int> ended_by_signal{0};

    std::mutex stats_mu;
    std::thread writer, flusher;
    int wake[2] = {-1, -1};              // the flusher's wake-up pipe (a signal, or the end)
};

State* g = nullptr;  // never freed: CUPTI may call back until the process ends
const char* const kKindNames[6] = {"CONCURRENT_KERNEL", "MEMCPY", "MEMSET", "RUNTIME", "DRIVER", "OVERHEAD"};

uint64_t now_ns() {
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void note_error(const std::string& what) {
    std::lock_guard<std::mutex> lock(g->error_mu);
    if (g->errors.size() < 64 || g->errors.count(what)) g->errors[what] += 1;
}

void check(CUptiResult result, const char* call) {
    if (result == CUPTI_SUCCESS) return;
    const char* text = nullptr;
    cuptiGetResultString(result, &text);
    note_error(std::string(call) + ": " + (text ? text : "unknown CUPTI error " + std::to_string(result)));
}

// --------------------------------------------------------------------------------------------- output

class Out {
public:
    explicit Out(size_t reserve) { text_.reserve(reserve); }
    Out& s(const char* t) { text_.append(t); return *this; }
    Out& s(const char* t, size_t n) { text_.append(t, n); return *this; }
    Out& u(uint64_t v) { return num(v); }
    Out& i(int64_t v) { return num(v); }
    size_t size() const { return text_.size(); }

    // Write what is here (whole records) in one write() a time: with O_APPEND, another process's
    // records can come between two writes, never inside one.
    void flush() {
        size_t done = 0;
        while (done < text_.size()) {
            ssize_t n = ::write(g->fd, text_.data() + done, text_.size() - done);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) {
                g->write_failures.fetch_add(1);
                note_error(std::string("write ") + g->settings.output + ": " + strerror(errno));
                break;
            }
            done += static_cast<size_t>(n);
        }
        g->bytes_written.fetch_add(done);
        text_.clear();
    }

private:
    template <typename T>
    Out& num(T v) {
        char buf[24];
        auto res = std::to_chars(buf, buf + sizeof buf, v);
        text_.append(buf, static_cast<size_t>(res.ptr - buf));
        return *this;
    }
    std::string text_;
};

const char* memcpy_kind(uint8_t k) {
    static const char* const names[] = {"UNKNOWN", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA",
                                        "AtoD",    "DtoA", "DtoD", "HtoH", "PtoP"};
    return k < sizeof(names) / sizeof(names[0]) ? names[k] : "UNKNOWN";
}

const char* memory_kind(uint8_t k) {
    static const char* const names[] = {"UNKNOWN", "PAGEABLE", "PINNED", "DEVICE",
                                        "ARRAY",   "MANAGED",  "DEVICE_STATIC", "MANAGED_STATIC"};
    return k < sizeof(names) / sizeof(names[0]) ? names[k] : "UNKNOWN";
}

const char* channel_type(CUpti_ChannelType t) {
    switch (t) {
        case CUPTI_CHANNEL_TYPE_COMPUTE: return "COMPUTE";
        case CUPTI_CHANNEL_TYPE_ASYNC_MEMCPY: return "ASYNC_MEMCPY";
        case CUPTI_CHANNEL_TYPE_DECOMP: return "DECOMP";
        default: return "INVALID";
    }
}

const char* overhead_kind(CUpti_ActivityOverheadKind k) {
    switch (k) {
        case CUPTI_ACTIVITY_OVERHEAD_DRIVER_COMPILER: return "DRIVER_COMPILER";
        case CUPTI_ACTIVITY_OVERHEAD_CUPTI_BUFFER_FLUSH: return "CUPTI_BUFFER_FLUSH";
        case CUPTI_ACTIVITY_OVERHEAD_CUPTI_INSTRUMENTATION: return "CUPTI_INSTRUMENTATION";
        case CUPTI_ACTIVITY_OVERHEAD_CUPTI_RESOURCE: return "CUPTI_RESOURCE";
        case CUPTI_ACTIVITY_OVERHEAD_RUNTIME_TRIGGERED_MODULE_LOADING: return "RUNTIME_TRIGGERED_MODULE_LOADING";
        case CUPTI_ACTIVITY_OVERHEAD_LAZY_FUNCTION_LOADING: return "LAZY_FUNCTION_LOADING";
        case CUPTI_ACTIVITY_OVERHEAD_COMMAND_BUFFER_FULL: return "COMMAND_BUFFER_FULL";
        case CUPTI_ACTIVITY_OVERHEAD_ACTIVITY_BUFFER_REQUEST: return "ACTIVITY_BUFFER_REQUEST";
        case CUPTI_ACTIVITY_OVERHEAD_UVM_ACTIVITY_INIT: return "UVM_ACTIVITY_INIT";
        default: return "UNKNOWN";
    }
}

const char* object_kind(CUpti_ActivityObjectKind k) {
    switch (k) {
        case CUPTI_ACTIVITY_OBJECT_PROCESS: return "PROCESS";
        case CUPTI_ACTIVITY_OBJECT_THREAD: return "THREAD";
        case CUPTI_ACTIVITY_OBJECT_DEVICE: return "DEVICE";
        case CUPTI_ACTIVITY_OBJECT_CONTEXT: return "CONTEXT";
        case CUPTI_ACTIVITY_OBJECT_STREAM: return "STREAM";
        default: return "UNKNOWN";
    }
}

uint32_t object_id(CUpti_ActivityObjectKind k, const CUpti_ActivityObjectKindId& id) {
    switch (k) {
        case CUPTI_ACTIVITY_OBJECT_PROCESS: return id.pt.processId;
        case CUPTI_ACTIVITY_OBJECT_THREAD: return id.pt.threadId;
        case CUPTI_ACTIVITY_OBJECT_DEVICE: return id.dcs.deviceId;
        case CUPTI_ACTIVITY_OBJECT_CONTEXT: return id.dcs.contextId;
        case CUPTI_ACTIVITY_OBJECT_STREAM: return id.dcs.streamId;
        default: return 0xffffffffu;
    }
}

// API names by callback id, looked up once (only the writer thread uses these tables).
const char* api_name(CUpti_CallbackDomain domain, uint32_t cbid) {
    static std::vector<const char*> tables[2];
    std::vector<const char*>& table = tables[domain == CUPTI_CB_DOMAIN_DRIVER_API ? 1 : 0];
    if (cbid >= table.size()) table.resize(cbid + 1, nullptr);
    if (table[cbid] == nullptr) {
        const char* name = nullptr;
        if (cuptiGetCallbackName(domain, cbid, &name) != CUPTI_SUCCESS || name == nullptr) name = "<unknown>";
        table[cbid] = name;
    }
    return table[cbid];
}

bool timed(uint64_t start, uint64_t end) { return start != 0 && end >= start; }

// The line a kernel, memcpy or memset record ends with: where it ran (device, context, stream, graph
// node, channel), the same fields and order in each.
template <typename R>
void placement(Out& out, const R* r) {
    out.s("\n\tdeviceId ").u(r->deviceId).s(", contextId ").u(r->contextId).s(", streamId ").u(r->streamId)
        .s(", graphId ").u(r->graphId).s(", graphNodeId ").u(r->graphNodeId).s(", channelId ")
        .u(r->channelID).s(", channelType ").s(channel_type(r->channelType)).s("\n");
}

// The lines of one record, as `cupti_trace_injection` (CUDA 12.x/13 helper_cupti_activity.h) prints them.
void format(Out& out, const CUpti_Activity* record) {
    switch (record->kind) {
        case CUPTI_ACTIVITY_KIND_KERNEL:
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
            auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
            if (!timed(k->start, k->end)) { g->timestamps_missing.fetch_add(1); return; }
            out.s(record->kind == CUPTI_ACTIVITY_KIND_KERNEL ? "KERNEL [ " : "CONCURRENT_KERNEL [ ")
                .u(k->start).s(", ").u(k->end).s(" ] duration ").u(k->end - k->start).s(", \"")
                .s(k->name ? k->name : "<unknown>").s("\", correlationId ").u(k->correlationId)
                .s(", cacheConfigRequested ").u(k->cacheConfig.config.requested)
                .s(", cacheConfigExecuted ").u(k->cacheConfig.config.executed)
                .s("\n\tgrid [ ").i(k->gridX).s(", ").i(k->gridY).s(", ").i(k->gridZ)
                .s(" ], block [ ").i(k->blockX).s(", ").i(k->blockY).s(", ").i(k->blockZ)
                .s(" ], cluster [ ").u(k->clusterX).s(", ").u(k->clusterY).s(", ").u(k->clusterZ)
                .s(" ], sharedMemory (static ").i(k->staticSharedMemory).s(", dynamic ").i(k->dynamicSharedMemory)
                .s(")");
            placement(out, k);
            g->by_kind[0].fetch_add(1, std::memory_order_relaxed);
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
            auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
            if (!timed(m->start, m->end)) { g->timestamps_missing.fetch_add(1); return; }
            out.s("MEMCPY \"").s(memcpy_kind(m->copyKind)).s("\" [ ").u(m->start).s(", ").u(m->end)
                .s(" ] duration ").u(m->end - m->start).s(", size ").u(m->bytes).s(", copyCount ").u(m->copyCount)
                .s(", srcKind ").s(memory_kind(m->srcKind)).s(", dstKind ").s(memory_kind(m->dstKind))
                .s(", correlationId ").u(m->correlationId);
            placement(out, m);
            g->by_kind[1].fetch_add(1, std::memory_order_relaxed);
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
            auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
            if (!timed(m->start, m->end)) { g->timestamps_missing.fetch_add(1); return; }
            out.s("MEMSET [ ").u(m->start).s(", ").u(m->end).s(" ] duration ").u(m->end - m->start)
                .s(", value ").u(m->value).s(", size ").u(m->bytes).s(", correlationId ").u(m->correlationId);
            placement(out, m);
            g->by_kind[2].fetch_add(1, std::memory_order_relaxed);
            break;
        }
        case CUPTI_ACTIVITY_KIND_RUNTIME:
        case CUPTI_ACTIVITY_KIND_DRIVER: {
            auto* a = reinterpret_cast<const CUpti_ActivityAPI*>(record);
            bool runtime = record->kind == CUPTI_ACTIVITY_KIND_RUNTIME;
            out.s(runtime ? "RUNTIME [ " : "DRIVER [ ").u(a->start).s(", ").u(a->end).s(" ] duration ")
                .u(a->end >= a->start ? a->end - a->start : 0).s(", \"")
                .s(api_name(runtime ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API, a->cbid))
                .s("\", cbid ").u(a->cbid).s(", processId ").u(a->processId).s(", threadId ").u(a->threadId)
                .s(", correlationId ").u(a->correlationId).s("\n");
            g->by_kind[runtime ? 3 : 4].fetch_add(1, std::memory_order_relaxed);
            break;
        }
        case CUPTI_ACTIVITY_KIND_OVERHEAD: {
            auto* o = reinterpret_cast<const CUpti_ActivityOverhead3*>(record);
            out.s("OVERHEAD ").s(overhead_kind(o->overheadKind)).s(" [ ").u(o->start).s(", ").u(o->end)
                .s(" ] duration ").u(o->end >= o->start ? o->end - o->start : 0).s(", ")
                .s(object_kind(o->objectKind)).s(", id ").u(object_id(o->objectKind, o->objectId))
                .s(", correlation id ").u(o->correlationId).s("\n");
            g->by_kind[5].fetch_add(1, std::memory_order_relaxed);
            break;
        }
        default:
            return;  // a kind not enabled here (another CUPTI client's); not counted
    }
    g->records.fetch_add(1, std::memory_order_relaxed);
}

// Every record of a buffer, in whole records, to the output.
void write_buffer(Out& out, uint8_t* data, size_t valid) {
    CUpti_Activity* record = nullptr;
    CUptiResult r;
    while ((r = cuptiActivityGetNextRecord(data, valid, &record)) == CUPTI_SUCCESS) {
        format(out, record);
        if (out.size() >= (4u << 20)) out.flush();
    }
    if (r != CUPTI_ERROR_MAX_LIMIT_REACHED) check(r, "cuptiActivityGetNextRecord");
    out.flush();
}

// ------------------------------------------------------------------------------------------- buffers

void write_stats();

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    uint8_t* data = nullptr;
    {
        std::lock_guard<std::mutex> lock(g->pool_mu);
        if (!g->free_buffers.empty()) {
            data = g->free_buffers.back();
            g->free_buffers.pop_back();
        } else if (g->allocated < g->settings.max_buffers) {
            data = static_cast<uint8_t*>(aligned_alloc(kAlign, g->settings.buffer_bytes));
            if (data != nullptr) g->allocated += 1;
        }
    }
    if (data == nullptr) {
        g->declined.fetch_add(1);
        note_error("buffer request declined: all " + std::to_string(g->settings.max_buffers) + " buffers of " +
                   std::to_string(g->settings.buffer_bytes >> 20) +
                   " MiB are in use (raise PERFLIB_CUPTI_MAX_BUFFERS); CUPTI drops records meanwhile");
    }
    *buffer = data;
    *size = data ? g->settings.buffer_bytes : 0;
    *max_records = 0;
}

void give_back(uint8_t* data) {
    std::lock_guard<std::mutex> lock(g->pool_mu);
    g->free_buffers.push_back(data);
}

void count_dropped(CUcontext context, uint32_t stream) {
    size_t dropped = 0;
    CUptiResult r = cuptiActivityGetNumDroppedRecords(context, stream, &dropped);
    if (r == CUPTI_SUCCESS) {
        if (dropped) g->dropped_cupti.fetch_add(dropped);
    } else if (r != CUPTI_ERROR_INVALID_PARAMETER) {
        check(r, "cuptiActivityGetNumDroppedRecords");
    }
}

// Kernel names point into CUPTI's memory, which a module's unloading may free before the writer
// formats the record: point them at copies owned here (a name is copied once).
void own_names(uint8_t* data, size_t valid) {
    CUpti_Activity* record = nullptr;
    std::lock_guard<std::mutex> lock(g->names_mu);
    while (cuptiActivityGetNextRecord(data, valid, &record) == CUPTI_SUCCESS) {
        if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && record->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
        auto* k = reinterpret_cast<CUpti_ActivityKernel10*>(record);
        if (k->name == nullptr) continue;
        auto it = g->names.find(k->name);
        if (it == g->names.end() || strcmp(it->second, k->name) != 0) {
            const char* copy = strdup(k->name);  // kept for the process's life, like CUPTI's own
            it = g->names.insert_or_assign(k->name, copy).first;
        }
        k->name = it->second;
    }
}

void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream, uint8_t* data, size_t, size_t valid) {
    count_dropped(context, stream);
    if (data == nullptr) return;
    g->buffers.fetch_add(1);
    if (valid == 0) { give_back(data); return; }
    own_names(data, valid);
    {
        std::lock_guard<std::mutex> lock(g->queue_mu);
        if (!g->writer_stop) {
            g->queue.push_back({data, valid});
            data = nullptr;
        }
    }
    if (data == nullptr) {
        g->queue_cv.notify_all();  // the writer, and finish() waiting for it to drain
        return;
    }
    // After the end (a context torn down after our atexit): written here, the writer being gone.
    static std::mutex late_mu;
    std::lock_guard<std::mutex> late(late_mu);
    Out out(1u << 20);
    write_buffer(out, data, valid);
    give_back(data);
    write_stats();
}

void writer_loop() {
    Out out(5u << 20);
    for (;;) {
        Filled next{};
        {
            std::unique_lock<std::mutex> lock(g->queue_mu);
            g->queue_cv.wait(lock, [] { return !g->queue.empty() || g->writer_stop; });
            if (g->queue.empty()) return;  // stopped and drained
            next = g->queue.front();
            g->queue.pop_front();
            g->writing += 1;
        }
        write_buffer(out, next.data, next.valid);
        give_back(next.data);
        {
            std::lock_guard<std::mutex> lock(g->queue_mu);
            g->writing -= 1;
        }
        g->queue_cv.notify_all();
    }
}

// Wait until the writer has written every buffer handed over so far.
void wait_drained() {
    std::unique_lock<std::mutex> lock(g->queue_mu);
    g->queue_cv.wait(lock, [] { return (g->queue.empty() && g->writing == 0) || !g->writer.joinable(); });
}

// ---------------------------------------------------------------------------------------------- stats

void json_string(std::string& out, const std::string& text) {
    out += '"';
    for (unsigned char c : text) {
        if (c == '"' || c == '\\') { out += '\\'; out += static_cast<char>(c); }
        else if (c < 0x20) { char buf[8]; snprintf(buf, sizeof buf, "\\u%04x", c); out += buf; }
        else out += static_cast<char>(c);
    }
    out += '"';
}

void count_resource_drops() {
    std::vector<CUcontext> contexts;
    std::vector<std::pair<CUcontext, uint32_t>> streams;
    {
        std::lock_guard<std::mutex> lock(g->resource_mu);
        contexts.assign(g->contexts.begin(), g->contexts.end());
        streams.assign(g->streams.begin(), g->streams.end());
    }
    count_dropped(nullptr, 0);
    for (CUcontext c : contexts) count_dropped(c, 0);
    for (auto& s : streams) count_dropped(s.first, s.second);
}

// The stats file, written whole to a temporary name and renamed over the old one: a reader never
// sees half of it.
void write_stats() {
    std::lock_guard<std::mutex> lock(g->stats_mu);
    const Settings& s = g->settings;
    uint64_t dropped_cupti = g->dropped_cupti.load(), missing = g->timestamps_missing.load();
    std::string j = "{\n  \"library\": \"perflib-cupti\",\n  \"version\": " + std::to_string(kVersion);
    j += ",\n  \"pid\": " + std::to_string(getpid()) + ",\n  \"output\": ";
    json_string(j, s.output);
    j += ",\n  \"records\": " + std::to_string(g->records.load());
    j += ",\n  \"records_by_kind\": {";
    for (int k = 0; k < 6; ++k) {
        j += (k ? ", \"" : "\"") + std::string(kKindNames[k]) + "\": " + std::to_string(g->by_kind[k].load());
    }
    j += "},\n  \"dropped_records\": " + std::to_string(dropped_cupti + missing);
    j += ",\n  \"dropped_by_cupti\": " + std::to_string(dropped_cupti);
    j += ",\n  \"timestamps_missing\": " + std::to_string(missing);
    j += ",\n  \"buffers\": " + std::to_string(g->buffers.load());
    {
        std::lock_guard<std::mutex> pool(g->pool_mu);
        j += ",\n  \"buffers_allocated\": " + std::to_string(g->allocated);
    }
    j += ",\n  \"buffer_bytes\": " + std::to_string(s.buffer_bytes);
    j += ",\n  \"max_buffers\": " + std::to_string(s.max_buffers);
    j += ",\n  \"buffer_requests_declined\": " + std::to_string(g->declined.load());
    j += ",\n  \"device_buffer_bytes\": " + std::to_string(s.device_buffer_bytes);
    j += ",\n  \"device_buffer_pool_limit\": " + std::to_string(s.device_pool_limit);
    j += ",\n  \"flush_ms\": " + std::to_string(s.flush_ms);
    j += ",\n  \"flushes\": " + std::to_string(g->flushes.load());
    j += ",\n  \"bytes_written\": " + std::to_string(g->bytes_written.load());
    j += ",\n  \"write_failures\": " + std::to_string(g->write_failures.load());
    j += ",\n  \"errors\": [";
    {
        std::lock_guard<std::mutex> errors(g->error_mu);
        bool first = true;
        for (auto& e : g->errors) {
            j += first ? "" : ", ";
            first = false;
            json_string(j, e.first + (e.second > 1 ? " (" + std::to_string(e.second) + " times)" : ""));
        }
    }
    j += "],\n  \"complete\": ";
    j += g->complete.load() ? "true" : "false";
    int sig = g->ended_by_signal.load();
    j += ",\n  \"ended_by\": ";
    j += g->complete.load() ? (sig ? "\"" + std::string(sig == SIGTERM ? "SIGTERM" : "SIGINT") + "\"" : "\"exit\"")
                            : "null";
    j += ",\n  \"started_unix_ns\": " + std::to_string(g->started_ns);
    j += ",\n  \"updated_unix_ns\": " + std::to_string(now_ns()) + "\n}\n";
    std::string tmp = s.stats + ".tmp" + std::to_string(getpid());
    FILE* f = fopen(tmp.c_str(), "w");
    if (f == nullptr) return;  // nowhere to say it but the log, once
    bool ok = fwrite(j.data(), 1, j.size(), f) == j.size();
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp.c_str(), s.stats.c_str()) != 0) unlink(tmp.c_str());
}

// ------------------------------------------------------------------------------- flushing and the end

void finish(int sig);

void flusher_loop() {
    for (;;) {
        pollfd p{g->wake[0], POLLIN, 0};
        int n = poll(&p, 1, static_cast<int>(g->settings.flush_ms));
        if (g->finishing.load()) return;
        if (n > 0) {
            char c;
            (void)!read(g->wake[0], &c, 1);
            int sig = g->ended_by_signal.load();
            if (sig) {
                finish(sig);
                signal(sig, SIG_DFL);  // then die of it, as the program would have without us
                raise(sig);
                return;
            }
            continue;
        }
        check(cuptiActivityFlushAll(0), "cuptiActivityFlushAll");
        check(cuptiGetLastError(), "CUPTI (last error)");
        g->flushes.fetch_add(1);
        count_resource_drops();
        write_stats();
    }
}

std::once_flag finish_once;

// The final forced flush, the writer drained, the stats marked complete. Runs once: at exit, or on a
// signal (from the flusher thread, not inside the handler).
void finish(int sig) {
    std::call_once(finish_once, [sig] {
        g->finishing.store(true);
        if (g->flusher.joinable() && std::this_thread::get_id() != g->flusher.get_id()) {
            (void)!write(g->wake[1], "x", 1);
            g->flusher.join();
        }
        check(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll(FORCED)");
        g->flushes.fetch_add(1);
        count_resource_drops();
        wait_drained();
        {
            std::lock_guard<std::mutex> lock(g->queue_mu);
            g->writer_stop = true;
        }
        g->queue_cv.notify_all();
        if (g->writer.joinable()) g->writer.join();
        g->ended_by_signal.store(sig);
        g->complete.store(true);
        write_stats();
        uint64_t dropped = g->dropped_cupti.load() + g->timestamps_missing.load();
        fprintf(stderr, "perflib-cupti: %llu records in %llu buffers written to %s; %llu dropped records; %zu "
                "CUPTI errors (%s)\n", static_cast<unsigned long long>(g->records.load()),
                static_cast<unsigned long long>(g->buffers.load()), g->settings.output.c_str(),
                static_cast<unsigned long long>(dropped), g->errors.size(), g->settings.stats.c_str());
    });
}

void at_exit() {
    if (getpid() == g->pid) finish(0);  // a forked child has neither the threads nor the file's records
}

void on_signal(int sig) {  // async-signal-safe: a store and a write
    g->ended_by_signal.store(sig);
    (void)!write(g->wake[1], "s", 1);
}

// Where the program left SIGTERM / SIGINT to their default action (dying without atexit), catch them
// to flush first. A program that handles them itself exits its own way, and atexit flushes.
void catch_signals() {
    for (int sig : {SIGTERM, SIGINT}) {
        struct sigaction old{};
        if (sigaction(sig, nullptr, &old) != 0) continue;
        if (!(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_DFL) {
            struct sigaction mine{};
            mine.sa_handler = on_signal;
            sigemptyset(&mine.sa_mask);
            mine.sa_flags = SA_RESTART;
            sigaction(sig, &mine, nullptr);
        }
    }
}

// ------------------------------------------------------------------------- contexts and streams seen

void CUPTIAPI on_resource(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) {
    if (domain != CUPTI_CB_DOMAIN_RESOURCE) return;
    auto* r = static_cast<const CUpti_ResourceData*>(data);
    switch (cbid) {
        case CUPTI_CBID_RESOURCE_CONTEXT_CREATED: {
            std::lock_guard<std::mutex> lock(g->resource_mu);
            g->contexts.insert(r->context);
            break;
        }
        case CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING: {
            // its count before it goes; no flush from inside CUPTI's callback (the buffers are global:
            // the next periodic or final flush delivers them)
            count_dropped(r->context, 0);
            std::lock_guard<std::mutex> lock(g->resource_mu);
            g->contexts.erase(r->context);
            for (auto it = g->streams.begin(); it != g->streams.end();) {
                it = it->first == r->context ? g->streams.erase(it) : std::next(it);
            }
            break;
        }
        case CUPTI_CBID_RESOURCE_STREAM_CREATED:
        case CUPTI_CBID_RESOURCE_STREAM_DESTROY_STARTING: {
            uint32_t id = 0;
            if (cuptiGetStreamIdEx(r->context, r->resourceHandle.stream, 0, &id) != CUPTI_SUCCESS) break;
            if (cbid == CUPTI_CBID_RESOURCE_STREAM_DESTROY_STARTING) count_dropped(r->context, id);
            std::lock_guard<std::mutex> lock(g->resource_mu);
            if (cbid == CUPTI_CBID_RESOURCE_STREAM_CREATED) g->streams.insert({r->context, id});
            else g->streams.erase({r->context, id});
            break;
        }
        default:
            break;
    }
}

void set_attribute(CUpti_ActivityAttribute attribute, size_t value, const char* name) {
    size_t size = sizeof(value);
    check(cuptiActivitySetAttribute(attribute, &size, &value), name);
}

int initialize() {
    g = new State();
    g->settings = read_settings();
    g->pid = getpid();
    g->started_ns = now_ns();
    const Settings& s = g->settings;
    g->fd = open(s.output.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (g->fd < 0) {
        fprintf(stderr, "perflib-cupti: error: cannot open PERFLIB_CUPTI_OUTPUT=%s: %s; not tracing\n",
                s.output.c_str(), strerror(errno));
        return 1;  // the program runs on, untraced
    }
    if (pipe2(g->wake, O_CLOEXEC | O_NONBLOCK) != 0) g->wake[0] = g->wake[1] = -1;
    {
        Out head(512);
        head.s("perflib-cupti ").i(kVersion).s(": pid ").i(getpid()).s(", host buffers ")
            .u(s.buffer_bytes >> 20).s(" MiB x ").u(s.max_buffers).s(" at most, device buffers ")
            .u(s.device_buffer_bytes >> 20).s(" MiB x ").u(s.device_pool_limit).s(" at most, flush every ")
            .u(s.flush_ms).s(" ms\n");
        head.flush();
    }
    // Device-side buffers: set before any context exists (InitializeInjection runs inside cuInit).
    set_attribute(CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE, s.device_buffer_bytes,
                  "cuptiActivitySetAttribute(DEVICE_BUFFER_SIZE)");
    set_attribute(CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_POOL_LIMIT, s.device_pool_limit,
                  "cuptiActivitySetAttribute(DEVICE_BUFFER_POOL_LIMIT)");
    check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "cuptiActivityRegisterCallbacks");

    CUpti_SubscriberHandle subscriber{};
    CUptiResult sub = cuptiSubscribe(&subscriber, reinterpret_cast<CUpti_CallbackFunc>(on_resource), nullptr);
    if (sub == CUPTI_SUCCESS) {
        check(cuptiEnableDomain(1, subscriber, CUPTI_CB_DOMAIN_RESOURCE), "cuptiEnableDomain(RESOURCE)");
    } else {
        check(sub, "cuptiSubscribe (per-context and per-stream dropped counts are off)");
    }

    struct { bool on; CUpti_ActivityKind kind; const char* name; } kinds[] = {
        {s.kernel, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, "cuptiActivityEnable(CONCURRENT_KERNEL)"},
        {s.memcpy, CUPTI_ACTIVITY_KIND_MEMCPY, "cuptiActivityEnable(MEMCPY)"},
        {s.memset, CUPTI_ACTIVITY_KIND_MEMSET, "cuptiActivityEnable(MEMSET)"},
        {s.runtime, CUPTI_ACTIVITY_KIND_RUNTIME, "cuptiActivityEnable(RUNTIME)"},
        {s.driver, CUPTI_ACTIVITY_KIND_DRIVER, "cuptiActivityEnable(DRIVER)"},
        {s.overhead, CUPTI_ACTIVITY_KIND_OVERHEAD, "cuptiActivityEnable(OVERHEAD)"},
    };
    for (auto& k : kinds) {
        if (k.on) check(cuptiActivityEnable(k.kind), k.name);
    }
    check(cuptiActivityFlushPeriod(s.flush_ms), "cuptiActivityFlushPeriod");

    g->writer = std::thread(writer_loop);
    if (g->wake[0] >= 0) g->flusher = std::thread(flusher_loop);
    atexit(at_exit);
    if (g->wake[1] >= 0) catch_signals();
    write_stats();
    return 1;
}

}  // namespace

// Called by the CUDA driver inside cuInit where CUDA_INJECTION64_PATH names this library.
PERFLIB_EXPORT int InitializeInjection(void) {
    static std::once_flag once;
    static int result = 1;
    std::call_once(once, [] { result = initialize(); });
    return result;
}

// What this library is, for a check from outside (`nm -D` lists it).
PERFLIB_EXPORT const char* perflib_cupti_version(void) { return "perflib-cupti 1"; }

/* python/native/xseg_torch.cc: xseg as PyTorch's CUDA allocator - a
 * c10::cuda::CUDACachingAllocator::CUDAAllocator over libxseg's C API.
 *
 * Installed the way PyTorch swaps its own allocators (changeCurrentAllocator,
 * and c10::SetAllocator so torch.accelerator sees it too), before CUDA is
 * initialised.  Every torch.cuda memory call then reaches xseg:
 *   - allocate / raw_alloc / the deleter: xseg_malloc and xseg_free on the
 *     current device and stream, no Python and no lock of ours on the way;
 *     a failure raises torch.OutOfMemoryError with xseg's diagnosis;
 *   - statistics: xseg_device_stats mapped onto torch's DeviceStats;
 *   - snapshots: xseg_walk (each mapped run of a segment is one of torch's
 *     segments) plus the history this file records when
 *     torch.cuda.memory._record_memory_history asks for it;
 *   - CUDA graphs and MemPool: torch's pool ids map to xseg private pools,
 *     and while allocations are routed to one, xseg makes no event call;
 *   - checkpoints of a pool's layout (torch.compile's CUDA graph trees):
 *     the live blocks of a pool, restored at their addresses with
 *     xseg_malloc_at.
 * What is not supported says why (docs/pytorch.md).
 *
 * One source builds against torch 2.11 and later: the virtuals only newer
 * versions have are declared without `override`, with types every version
 * has; where behaviour must differ, TORCH_VERSION_* decides.  The built
 * module is for the torch it was built against (the vtable differs between
 * versions); python/xseg/torch.py checks that before loading it.
 */
#include <c10/core/Allocator.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/cuda/CUDAPluggableAllocator.h>
#include <torch/headeronly/version.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "xseg.h"

#define XS_TORCH_AT_LEAST(ma, mi) (TORCH_VERSION_MAJOR > (ma) || (TORCH_VERSION_MAJOR == (ma) && TORCH_VERSION_MINOR >= (mi)))

namespace xs_torch {

namespace CCA = c10::cuda::CUDACachingAllocator;
namespace CDA = c10::CachingDeviceAllocator;
using c10::DeviceIndex;
using c10::MempoolId_t;

constexpr int kMaxDevices = 64;

/* ---- history: contexts of live blocks and the trace ring ------------------------------- */

/* What torch.cuda.memory._record_memory_history switched on.  The flags are
 * read on every allocation without a lock; the rest under `mu`.  Never
 * destroyed: tensors freed by static destructors at exit still reach it. */
struct History {
  std::atomic<bool> on{false};          /* contexts or trace entries wanted */
  std::atomic<bool> trackers_on{false}; /* attachAllocatorTraceTracker was called */
  std::mutex mu;
  CDA::CreateContextFn recorder = nullptr;
  CDA::RecordContext when = CDA::RecordContext::NEVER;
  size_t max_entries = 1;
  std::unordered_set<int> skip;                                   /* TraceEntry::Action values */
  std::unordered_map<const void*, std::shared_ptr<c10::GatheredContext>> contexts;
  std::vector<std::vector<CDA::TraceEntry>> ring;                 /* per device, oldest at `next` when full */
  std::vector<size_t> next;
  std::vector<CDA::AnnotationEntry> annotations;
  std::vector<CDA::AllocatorTraceTracker> trackers;
};

History& history() {
  static History* h = new History();
  return *h;
}

thread_local std::vector<std::string> t_compile_context;
thread_local std::string t_user_metadata;

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

/* Append a trace entry (and tell the trackers).  h.mu held. */
void record_locked(History& h, CDA::TraceEntry::Action action, DeviceIndex dev, size_t addr, size_t size,
                   void* stream, MempoolId_t pool, std::shared_ptr<c10::GatheredContext> ctx) {
  std::string cc = t_compile_context.empty() ? "N/A" : t_compile_context.back();
  CDA::TraceEntry te(action, dev, addr, size, stream, pool, 0,
                     h.when >= CDA::RecordContext::ALLOC ? std::move(ctx) : nullptr, cc, t_user_metadata);
  te.time_.t_ = now_us();
  for (auto& t : h.trackers) t(te);
  if (!h.on.load(std::memory_order_relaxed) || h.skip.count(static_cast<int>(action))) return;
  if (dev < 0 || static_cast<size_t>(dev) >= h.ring.size()) return;
  auto& ring = h.ring[dev];
  if (ring.size() < h.max_entries) {
    ring.push_back(std::move(te));
  } else if (h.max_entries > 0) {
    ring[h.next[dev]] = std::move(te);
    h.next[dev] = (h.next[dev] + 1) % h.max_entries;
  }
}

/* The context torch's recorder gives for now, if contexts are wanted at
 * least as much as `level`.  Called before any lock: it may take the GIL. */
std::shared_ptr<c10::GatheredContext> gather(CDA::RecordContext level) {
  History& h = history();
  CDA::CreateContextFn rec;
  {
    std::lock_guard<std::mutex> g(h.mu);
    if (h.when < level) return nullptr;
    rec = h.recorder;
  }
  return rec ? rec() : nullptr;
}

/* ---- pools ---------------------------------------------------------------------------------- */

struct PoolRec {
  int xid = 0;          /* the xseg private pool */
  int use_count = 0;
  bool use_on_oom = false;
};

struct Route {
  MempoolId_t id;
  int xid;
  std::function<bool(cudaStream_t)> filter;
};

struct Device {
  std::atomic<int> nroutes{0}; /* read on every allocation */
  std::mutex mu;               /* routes */
  std::vector<Route> routes;
  double fraction = 1.0;
};

struct Pools {
  std::mutex mu;
  std::map<std::pair<DeviceIndex, MempoolId_t>, PoolRec> open;
  std::map<std::pair<DeviceIndex, int>, MempoolId_t> by_xid; /* kept after release, for snapshots */
};

Device g_dev[kMaxDevices];

Pools& pools() {
  static Pools* p = new Pools();
  return *p;
}

std::atomic<bool> g_enabled{true};

/* ---- the deleters ------------------------------------------------------------------------------ */

void note_free(void* p);

/* The deleter of every DataPtr this allocator hands out (raw_deleter()).
 * A plain function reaching xseg directly, so it works during static
 * destruction at exit, when cuBLAS workspaces are freed. */
void xseg_raw_delete(void* p) {
  if (!p) return;
  if (history().on.load(std::memory_order_relaxed) || history().trackers_on.load(std::memory_order_relaxed))
    note_free(p);
  if (xseg_free(p) != 0) std::fprintf(stderr, "xseg: freeing a tensor's memory: %s\n", xseg_last_error());
}

/* caching_allocator_enable(False): straight to the CUDA runtime, as torch's own. */
void uncached_delete(void* p) {
  if (p && cudaFree(p) != cudaSuccess) std::fprintf(stderr, "xseg: cudaFree(%p) failed\n", p);
}

/* ---- allocation ------------------------------------------------------------------------------ */

std::string xseg_error() { return xseg_last_error(); }

/* The private pool an allocation on `stream` goes to (0: none), the last
 * route whose filter takes it first, as torch's own allocator. */
int route(DeviceIndex dev, cudaStream_t stream, MempoolId_t* id) {
  Device& d = g_dev[dev];
  std::lock_guard<std::mutex> g(d.mu);
  for (auto it = d.routes.rbegin(); it != d.routes.rend(); ++it) {
    if (it->filter(stream)) {
      *id = it->id;
      return it->xid;
    }
  }
  return 0;
}

/* What the driver has free on dev, through xseg (no CUDA runtime call on
 * the failure path): 0 if it cannot say. */
size_t device_free(DeviceIndex dev) {
  size_t free_b = 0, total = 0;
  return xseg_mem_info(dev, &free_b, &total) == 0 ? free_b : 0;
}

using OomObserver = std::function<void(int64_t, size_t, size_t, size_t)>;
std::mutex g_obs_mu;
std::vector<OomObserver>& oom_observers() {
  static auto* v = new std::vector<OomObserver>();
  return *v;
}

[[noreturn]] void raise_failure(size_t size, DeviceIndex dev, cudaStream_t stream, MempoolId_t id) {
  const std::string why = xseg_error(); /* before later calls replace it */
  if (xseg_last_error_code() != XSEG_ENOMEM) TORCH_CHECK(false, why);
  size_t free_b = device_free(dev);
  {
    History& h = history();
    if (h.on.load() || h.trackers_on.load()) {
      std::lock_guard<std::mutex> g(h.mu);
      record_locked(h, CDA::TraceEntry::OOM, dev, free_b, size, stream, id, nullptr);
    }
  }
  xseg_device_stats_t st{};
  st.struct_size = sizeof st;
  size_t limit = xseg_device_stats(dev, &st) == 0 ? static_cast<size_t>(st.limit_bytes) : 0;
  std::vector<OomObserver> obs;
  {
    std::lock_guard<std::mutex> g(g_obs_mu);
    obs = oom_observers();
  }
  for (auto& o : obs) o(dev, size, limit, free_b); /* no lock of ours held: they take the GIL */
  TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory. ", why);
}

/* After a default-pool allocation failed: pools opened with use_on_oom. */
void* try_oom_pools(size_t size, DeviceIndex dev, cudaStream_t stream) {
  std::vector<int> xids;
  {
    Pools& ps = pools();
    std::lock_guard<std::mutex> g(ps.mu);
    for (auto& kv : ps.open)
      if (kv.first.first == dev && kv.second.use_on_oom) xids.push_back(kv.second.xid);
  }
  for (int x : xids) {
    void* p = xseg_malloc_in_pool(size, dev, reinterpret_cast<xseg_stream_t>(stream), x);
    if (p) return p;
  }
  return nullptr;
}

void note_alloc(void* p, size_t size, DeviceIndex dev, cudaStream_t stream, MempoolId_t id,
                std::shared_ptr<c10::GatheredContext> ctx) {
  History& h = history();
  std::lock_guard<std::mutex> g(h.mu);
  if (ctx && h.on.load()) h.contexts[p] = ctx;
  record_locked(h, CDA::TraceEntry::ALLOC, dev, reinterpret_cast<size_t>(p), size, stream, id, std::move(ctx));
}

void note_free(void* p) {
  void* base = nullptr;
  size_t size = 0;
  if (xseg_base_allocation(p, &base, &size) != 0) return;
  auto ctx = gather(CDA::RecordContext::ALL);
  History& h = history();
  std::lock_guard<std::mutex> g(h.mu);
  h.contexts.erase(p);
  DeviceIndex dev = c10::cuda::current_device();
  for (auto a : {CDA::TraceEntry::FREE_REQUESTED, CDA::TraceEntry::FREE_COMPLETED})
    record_locked(h, a, dev, reinterpret_cast<size_t>(p), size, nullptr, {0, 0}, ctx);
}

/* The allocation every entry point ends in. */
void* alloc_on(size_t size, DeviceIndex dev, cudaStream_t stream) {
  TORCH_CHECK(dev >= 0 && dev < kMaxDevices, "xseg: device ", static_cast<int>(dev), " out of range");
  const bool hist = history().on.load(std::memory_order_relaxed) || history().trackers_on.load(std::memory_order_relaxed);
  std::shared_ptr<c10::GatheredContext> ctx = hist ? gather(CDA::RecordContext::STATE) : nullptr;
  MempoolId_t id{0, 0};
  int xid = g_dev[dev].nroutes.load(std::memory_order_acquire) ? route(dev, stream, &id) : 0;
  auto s = reinterpret_cast<xseg_stream_t>(stream);
  void* p = xid ? xseg_malloc_in_pool(size, dev, s, xid) : xseg_malloc(size, dev, s);
  if (!p && !xid && xseg_last_error_code() == XSEG_ENOMEM) p = try_oom_pools(size, dev, stream);
  if (!p) raise_failure(size, dev, stream, id);
  if (hist) note_alloc(p, size, dev, stream, id, std::move(ctx));
  return p;
}

/* ---- snapshots ------------------------------------------------------------------------------ */

struct Walk {
  DeviceIndex dev;
  std::vector<CDA::SegmentInfo> segs;
  std::vector<std::vector<uintptr_t>> addrs; /* block addresses, for the contexts */
  std::vector<int> xids;
};

int walk_segment(void* arg, const xseg_segment_info_t* s) {
  auto* w = static_cast<Walk*>(arg);
  CDA::SegmentInfo si;
  si.device = w->dev;
  si.address = s->address;
  si.total_size = s->size;
  si.stream = s->stream;
  si.is_large = s->large != 0;
  si.is_expandable = s->expandable != 0;
  w->segs.push_back(std::move(si));
  w->addrs.emplace_back();
  w->xids.push_back(s->pool);
  return 0;
}

int walk_block(void* arg, const xseg_block_info_t* b) {
  auto* w = static_cast<Walk*>(arg);
  CDA::SegmentInfo& si = w->segs.back();
  CDA::BlockInfo bi;
  bi.size = b->size;
  bi.allocated = b->state == XSEG_BLOCK_LIVE;
  bi.active = b->state != XSEG_BLOCK_FREE;
  bi.requested_size = bi.allocated ? b->requested : 0;
  if (bi.allocated) {
    si.allocated_size += b->size;
    si.requested_size += b->requested;
  }
  if (bi.active) si.active_size += b->size;
  si.blocks.push_back(std::move(bi));
  w->addrs.back().push_back(b->address);
  return 0;
}

/* Devices whose xseg allocator exists: the others are never touched. */
std::vector<DeviceIndex> active_devices() {
  std::vector<DeviceIndex> v;
  int n = xseg_device_count();
  for (int i = 0; i < n && i < kMaxDevices; i++)
    if (xseg_device_active(i) == 1) v.push_back(static_cast<DeviceIndex>(i));
  return v;
}

/* Segments and blocks of one device; with a pool id, that pool's only. */
void snapshot_device(DeviceIndex dev, MempoolId_t only, std::vector<CDA::SegmentInfo>& out) {
  Walk w;
  w.dev = dev;
  xseg_walker_t wk = {walk_segment, walk_block};
  int rc = xseg_walk(dev, &wk, &w);
  TORCH_CHECK(rc == 0, "xseg: snapshot of device ", static_cast<int>(dev), ": ", xseg_error());
  std::map<int, MempoolId_t> ids;
  {
    Pools& ps = pools();
    std::lock_guard<std::mutex> g(ps.mu);
    for (int x : w.xids)
      if (x && ps.by_xid.count({dev, x})) ids[x] = ps.by_xid[{dev, x}];
  }
  History& h = history();
  std::lock_guard<std::mutex> g(h.mu);
  for (size_t i = 0; i < w.segs.size(); i++) {
    MempoolId_t owner = w.xids[i] && ids.count(w.xids[i]) ? ids[w.xids[i]] : MempoolId_t{0, 0};
    if ((only.first || only.second) && owner != only) continue;
    CDA::SegmentInfo& si = w.segs[i];
    si.owner_private_pool_id = owner;
    for (size_t k = 0; k < si.blocks.size(); k++) {
      if (!si.blocks[k].allocated) continue;
      auto it = h.contexts.find(reinterpret_cast<const void*>(w.addrs[i][k]));
      if (it != h.contexts.end()) si.blocks[k].context_when_allocated = it->second;
    }
    out.push_back(std::move(si));
  }
}

/* ---- checkpoints of a pool (CUDA graph trees) ------------------------------------------------- */

struct PoolState : CCA::AllocatorState {
  DeviceIndex dev;
  MempoolId_t id;
  int xid;
  struct Blk {
    uintptr_t addr;
    size_t size;
    void* stream;
  };
  std::vector<Blk> live;
};

struct LiveWalk {
  int xid;
  bool in_pool = false;
  void* stream = nullptr;
  std::vector<PoolState::Blk> live;
};

int live_segment(void* arg, const xseg_segment_info_t* s) {
  auto* w = static_cast<LiveWalk*>(arg);
  w->in_pool = s->pool == w->xid;
  w->stream = s->stream;
  return 0;
}

int live_block(void* arg, const xseg_block_info_t* b) {
  auto* w = static_cast<LiveWalk*>(arg);
  if (w->in_pool && b->state == XSEG_BLOCK_LIVE) w->live.push_back({b->address, b->size, w->stream});
  return 0;
}

std::vector<PoolState::Blk> live_blocks(DeviceIndex dev, int xid) {
  LiveWalk w;
  w.xid = xid;
  xseg_walker_t wk = {live_segment, live_block};
  TORCH_CHECK(xseg_walk(dev, &wk, &w) == 0, "xseg: ", xseg_error());
  return w.live;
}

int pool_xid(DeviceIndex dev, MempoolId_t id) {
  Pools& ps = pools();
  std::lock_guard<std::mutex> g(ps.mu);
  auto it = ps.open.find({dev, id});
  TORCH_CHECK(it != ps.open.end(), "xseg: device ", static_cast<int>(dev), " has no open pool (", id.first, ", ",
              id.second, ")");
  return it->second.xid;
}

/* ---- the allocator ---------------------------------------------------------------------------- */

class XsegAllocator final : public CCA::CUDAAllocator {
 public:
  using CCA::CUDAAllocator::recordStream;

  /* -- c10::Allocator -- */
  c10::DataPtr allocate(size_t size) override {
    DeviceIndex dev = c10::cuda::current_device();
    if (size == 0) return {nullptr, nullptr, &xseg_raw_delete, c10::Device(c10::DeviceType::CUDA, dev)};
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream(dev).stream();
    if (!g_enabled.load(std::memory_order_relaxed)) {
      void* p = nullptr;
      C10_CUDA_CHECK(cudaMalloc(&p, size));
      return {p, p, &uncached_delete, c10::Device(c10::DeviceType::CUDA, dev)};
    }
    void* p = alloc_on(size, dev, stream);
    return {p, p, &xseg_raw_delete, c10::Device(c10::DeviceType::CUDA, dev)};
  }
  c10::DeleterFnPtr raw_deleter() const override {
    return g_enabled.load(std::memory_order_relaxed) ? &xseg_raw_delete : &uncached_delete;
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    C10_CUDA_CHECK(cudaMemcpy(dest, src, count, cudaMemcpyDeviceToDevice));
  }

  /* -- c10::DeviceAllocator -- */
  bool initialized() override { return initialized_.load(); }
  void emptyCache(MempoolId_t id) override {
    /* As torch's own: the device's pools are not emptied while a capture
     * routes allocations (a pool id asks for that pool, which xseg frees
     * once released). */
    if (!id.first && !id.second && any_routes()) return;
    TORCH_CHECK(xseg_empty_cache(-1) == 0, "xseg: empty_cache: ", xseg_error());
  }
  CDA::DeviceStats getDeviceStats(DeviceIndex dev) override;
  void resetAccumulatedStats(DeviceIndex dev) override {
    if (xseg_device_active(dev) == 1) TORCH_CHECK(xseg_reset_accumulated_stats(dev) == 0, "xseg: ", xseg_error());
  }
  void resetPeakStats(DeviceIndex dev) override {
    if (xseg_device_active(dev) == 1) TORCH_CHECK(xseg_reset_peak_stats(dev) == 0, "xseg: ", xseg_error());
  }

  /* -- CUDAAllocator -- */
  void* raw_alloc(size_t n) override {
    if (n == 0) return nullptr;
    DeviceIndex dev = c10::cuda::current_device();
    return alloc_on(n, dev, c10::cuda::getCurrentCUDAStream(dev).stream());
  }
  void* raw_alloc_with_stream(size_t n, cudaStream_t stream) override {
    if (n == 0) return nullptr;
    return alloc_on(n, c10::cuda::current_device(), stream);
  }
  void raw_delete(void* p) override {
    if (!p) return;
    if (history().on.load() || history().trackers_on.load()) note_free(p);
    TORCH_CHECK(xseg_free(p) == 0, "xseg: ", xseg_error());
  }
  void init(int device_count) override {
    TORCH_CHECK(device_count <= kMaxDevices, "xseg: ", device_count, " devices; at most ", kMaxDevices);
    History& h = history();
    std::lock_guard<std::mutex> g(h.mu);
    if (h.ring.size() < static_cast<size_t>(device_count)) {
      h.ring.resize(device_count);
      h.next.resize(device_count);
    }
    initialized_.store(true);
  }
  double getMemoryFraction(DeviceIndex dev) override { return g_dev[check_dev(dev)].fraction; }
  void setMemoryFraction(double fraction, DeviceIndex dev) override {
    TORCH_CHECK(fraction > 0 && fraction <= 1, "xseg: invalid fraction ", fraction,
                ": xseg takes a fraction in (0, 1]; 0 would allow no allocation at all");
    TORCH_CHECK(xseg_set_memory_fraction(fraction, check_dev(dev)) == 0, "xseg: ", xseg_error());
    g_dev[dev].fraction = fraction;
  }
  std::vector<CCA::StreamSegmentSize> getExpandableSegmentSizes(DeviceIndex dev) override;
  void enable(bool value) override { g_enabled.store(value); }
  bool isEnabled() const override { return g_enabled.load(); }
  void cacheInfo(DeviceIndex dev, size_t* largest) override {
    TORCH_CHECK(xseg_cache_info(dev, largest) == 0, "xseg: ", xseg_error());
  }
  void* getBaseAllocation(void* ptr, size_t* size) override {
    void* base = nullptr;
    TORCH_CHECK(xseg_base_allocation(ptr, &base, size) == 0, "xseg: ", xseg_error());
    return base;
  }
  void recordStream(const c10::DataPtr& ptr, c10::cuda::CUDAStream stream) override {
    /* Only memory xseg handed out: not received IPC memory or uncached blocks. */
    if (!ptr.get() || ptr.get_deleter() != &xseg_raw_delete) return;
    TORCH_CHECK(xseg_record_stream(ptr.get(), reinterpret_cast<xseg_stream_t>(stream.stream())) == 0, "xseg: ",
                xseg_error());
  }
  CCA::SnapshotInfo snapshot(MempoolId_t id, bool include_traces) override;
  void beginAllocateToPool(DeviceIndex dev, MempoolId_t id, std::function<bool(cudaStream_t)> filter) override;
  void endAllocateToPool(DeviceIndex dev, MempoolId_t id) override;
  void releasePool(DeviceIndex dev, MempoolId_t id) override;
  int getPoolUseCount(DeviceIndex dev, MempoolId_t id) override {
    Pools& ps = pools();
    std::lock_guard<std::mutex> g(ps.mu);
    auto it = ps.open.find({dev, id});
    return it == ps.open.end() ? 0 : it->second.use_count;
  }
  void createOrIncrefPool(DeviceIndex dev, MempoolId_t id, std::shared_ptr<CCA::CUDAAllocator> allocator) override {
    TORCH_CHECK(!allocator || allocator.get() == this,
                "xseg: MemPool(allocator=...) with an allocator other than xseg: xseg's pools hold xseg memory "
                "only; create the MemPool without an allocator");
    incref_pool(dev, id);
  }
  void setUseOnOOM(DeviceIndex dev, MempoolId_t id, bool use_on_oom) override {
    Pools& ps = pools();
    std::lock_guard<std::mutex> g(ps.mu);
    auto it = ps.open.find({dev, id});
    TORCH_CHECK(it != ps.open.end(), "xseg: setUseOnOOM: no such pool");
    it->second.use_on_oom = use_on_oom;
  }
  void setNoSplit(DeviceIndex, MempoolId_t) override {
    TORCH_CHECK(false, "xseg: MemPool(no_split=True) is not supported: xseg splits free blocks in every pool "
                       "(pages keep the remainder reusable); create the MemPool without no_split");
  }
  bool checkPoolLiveAllocations(DeviceIndex dev, MempoolId_t id, const std::unordered_set<void*>& expected) override {
    auto live = live_blocks(dev, pool_xid(dev, id));
    if (live.size() != expected.size()) return false;
    for (auto& b : live)
      if (!expected.count(reinterpret_cast<void*>(b.addr))) return false;
    return true;
  }
  CCA::ShareableHandle shareIpcHandle(void* ptr) override;
  std::shared_ptr<void> getIpcDevPtr(std::string handle) override;
  bool isHistoryEnabled() override { return history().on.load(); }
  void recordHistory(bool enabled, CDA::CreateContextFn recorder, size_t max_entries, CDA::RecordContext when,
                     bool clear, const std::vector<std::string>& skip_actions) override;
  void recordAnnotation(const std::vector<std::pair<std::string, std::string>>& md) override {
    History& h = history();
    if (!h.on.load()) return;
    std::lock_guard<std::mutex> g(h.mu);
    CDA::AnnotationEntry ae(c10::cuda::current_device(), 0);
    ae.time_.t_ = now_us();
    for (auto& kv : md) ae.recordUserMetadata(kv.first, kv.second);
    h.annotations.push_back(std::move(ae));
  }
  void pushCompileContext(std::string& md) override { t_compile_context.push_back(md); }
  void popCompileContext() override {
    if (!t_compile_context.empty()) t_compile_context.pop_back();
  }
  void setUserMetadata(const std::string& md) override { t_user_metadata = md; }
  std::string getUserMetadata() override { return t_user_metadata; }
  void attachOutOfMemoryObserver(CCA::OutOfMemoryObserver observer) override {
    std::lock_guard<std::mutex> g(g_obs_mu);
    oom_observers().push_back(std::move(observer));
  }
  void attachAllocatorTraceTracker(CDA::AllocatorTraceTracker tracker) override {
    History& h = history();
    std::lock_guard<std::mutex> g(h.mu);
    h.trackers.push_back(std::move(tracker));
    h.trackers_on.store(true);
  }
  void enablePeerAccess(DeviceIndex dev, DeviceIndex dev_to_access) override;
  cudaError_t memcpyAsync(void* dst, int dst_dev, const void* src, int src_dev, size_t count, cudaStream_t stream,
                          bool p2p_enabled) override {
    /* Mapped (cuMemMap) memory needs the peer copy when peer access is off. */
    if (p2p_enabled || dst_dev == src_dev) return cudaMemcpyAsync(dst, src, count, cudaMemcpyDeviceToDevice, stream);
    return cudaMemcpyPeerAsync(dst, dst_dev, src, src_dev, count, stream);
  }
  std::shared_ptr<CCA::AllocatorState> getCheckpointState(DeviceIndex dev, MempoolId_t id) override;
  CCA::CheckpointDelta setCheckpointPoolState(DeviceIndex dev, std::shared_ptr<CCA::AllocatorState> state) override;
  std::string name() override { return "xseg"; }

  /* -- virtuals of newer torch (no `override`: 2.11 lacks them) -- */
  virtual void markCaptureBegin(DeviceIndex) {}
  virtual void markCaptureEnd(DeviceIndex) {}
  virtual std::shared_ptr<c10::GatheredContext> getContextForPointer(const void* ptr) {
    History& h = history();
    std::lock_guard<std::mutex> g(h.mu);
    auto it = h.contexts.find(ptr);
    return it == h.contexts.end() ? nullptr : it->second;
  }
  virtual bool supportsUserMetadata() { return true; }
  virtual void annotateMemory(const void* ptr, const std::string& md) {
#if XS_TORCH_AT_LEAST(2, 15)
    History& h = history();
    std::lock_guard<std::mutex> g(h.mu);
    std::string saved = t_user_metadata;
    t_user_metadata = md;
    record_locked(h, CDA::TraceEntry::ANNOTATE, c10::cuda::current_device(), reinterpret_cast<size_t>(ptr), 0,
                  nullptr, {0, 0}, nullptr);
    t_user_metadata = saved;
#else
    (void)ptr;
    (void)md;
#endif
  }
  /* Allocations xseg refuses before trying (torch's throw_on_cudamalloc_oom
   * policy): xseg has none, so these observers are kept and never called. */
  virtual void attachOomRejectionObserver(std::function<void(int64_t, size_t, size_t, size_t)> observer) {
    std::lock_guard<std::mutex> g(g_obs_mu);
    rejection_observers_.push_back(std::move(observer));
  }
  virtual c10::DataPtr allocateWithAddress(size_t, void*) {
    TORCH_CHECK(false, "xseg: allocateWithAddress is not supported (torch itself does not call it)");
  }

 private:
  static DeviceIndex check_dev(DeviceIndex dev) {
    TORCH_CHECK(dev >= 0 && dev < kMaxDevices, "xseg: device ", static_cast<int>(dev), " out of range");
    return dev;
  }
  static bool any_routes() {
    for (auto& d : g_dev)
      if (d.nroutes.load()) return true;
    return false;
  }
  static int incref_pool(DeviceIndex dev, MempoolId_t id);
  std::atomic<bool> initialized_{false};
  std::vector<OomObserver> rejection_observers_;
};

/* ---- statistics ------------------------------------------------------------------------------- */

void copy_stat(c10::CachingAllocator::Stat& to, const xseg_stat_t& from) {
  to.current = from.current;
  to.peak = from.peak;
  to.allocated = from.allocated;
  to.freed = from.freed;
}

void copy_array(c10::CachingAllocator::StatArray& to, const xseg_stat_t from[3]) {
  for (int i = 0; i < 3; i++) copy_stat(to[i], from[i]);
}

CDA::DeviceStats XsegAllocator::getDeviceStats(DeviceIndex dev) {
  CDA::DeviceStats out;
  if (xseg_device_active(dev) != 1) return out; /* never used: all zero, and the GPU left alone */
  xseg_device_stats_t s{};
  s.struct_size = sizeof s;
  TORCH_CHECK(xseg_device_stats(dev, &s) == 0, "xseg: ", xseg_error());
  copy_array(out.allocation, s.allocation);
  copy_array(out.segment, s.segment);
  copy_array(out.active, s.active);
  copy_array(out.inactive_split, s.inactive_split);
  copy_array(out.allocated_bytes, s.allocated_bytes);
  copy_array(out.reserved_bytes, s.reserved_bytes);
  copy_array(out.active_bytes, s.active_bytes);
  copy_array(out.inactive_split_bytes, s.inactive_split_bytes);
  copy_array(out.requested_bytes, s.requested_bytes);
  copy_stat(out.oversize_allocations, s.oversize_allocations);
  copy_stat(out.oversize_segments, s.oversize_segments);
  out.num_alloc_retries = static_cast<int64_t>(s.num_alloc_retries);
  out.num_ooms = static_cast<int64_t>(s.num_ooms);
  out.num_sync_all_streams = static_cast<int64_t>(s.num_sync_all_streams);
  out.num_device_alloc = static_cast<int64_t>(s.num_device_alloc);
  out.num_device_free = static_cast<int64_t>(s.num_device_free);
  out.max_split_size = static_cast<int64_t>(s.max_split_size); /* no limit: -1, as torch's own shows it */
  return out;
}

std::vector<CCA::StreamSegmentSize> XsegAllocator::getExpandableSegmentSizes(DeviceIndex dev) {
  std::vector<CCA::StreamSegmentSize> out;
  if (xseg_device_active(dev) != 1) return out;
  std::vector<CDA::SegmentInfo> segs;
  snapshot_device(dev, {0, 0}, segs);
  for (auto& s : segs)
    if (s.is_expandable) out.emplace_back(static_cast<cudaStream_t>(s.stream), !s.is_large, s.total_size);
  return out;
}

/* ---- snapshots and history ---------------------------------------------------------------------- */

CCA::SnapshotInfo XsegAllocator::snapshot(MempoolId_t id, bool include_traces) {
  CCA::SnapshotInfo out;
  for (DeviceIndex dev : active_devices()) snapshot_device(dev, id, out.segments);
  std::sort(out.segments.begin(), out.segments.end(),
            [](const CDA::SegmentInfo& a, const CDA::SegmentInfo& b) { return a.address < b.address; });
  History& h = history();
  std::lock_guard<std::mutex> g(h.mu);
  size_t total_active = 0;
  for (auto& s : out.segments) total_active += s.active_size;
  DeviceIndex dev = c10::cuda::current_device();
  record_locked(h, CDA::TraceEntry::SNAPSHOT, dev, 0, total_active, nullptr, {0, 0}, nullptr);
  if (include_traces) {
    out.device_traces.resize(h.ring.size());
    for (size_t d = 0; d < h.ring.size(); d++) {
      const auto& ring = h.ring[d];
      size_t n = ring.size(), start = n < h.max_entries ? 0 : h.next[d];
      for (size_t i = 0; i < n; i++) out.device_traces[d].push_back(ring[(start + i) % n]);
    }
    out.external_annotations = h.annotations;
  }
  auto& cfg = out.config_metadata;
  cfg.garbage_collection_threshold = 0;
  cfg.max_split_size = SIZE_MAX;
  cfg.pinned_num_register_threads = 1;
  cfg.expandable_segments = true;
  cfg.release_lock_on_malloc = false;
  cfg.pinned_use_host_register = false;
  cfg.graph_capture_record_stream_reuse = false;
  const char* conf = std::getenv("XSEG_ALLOC_CONF");
  cfg.last_allocator_settings = std::string("xseg:") + (conf ? conf : "");
  return out;
}

void XsegAllocator::recordHistory(bool enabled, CDA::CreateContextFn recorder, size_t max_entries,
                                  CDA::RecordContext when, bool clear, const std::vector<std::string>& skip_actions) {
  History& h = history();
  std::lock_guard<std::mutex> g(h.mu);
  h.recorder = enabled ? recorder : nullptr;
  h.when = enabled ? when : CDA::RecordContext::NEVER;
  h.max_entries = std::max<size_t>(1, max_entries);
  h.skip.clear();
  for (auto& a : skip_actions) h.skip.insert(static_cast<int>(CDA::parseTraceEntryAction(a)));
  if (!enabled || clear) {
    for (auto& r : h.ring) r.clear();
    std::fill(h.next.begin(), h.next.end(), 0);
    h.annotations.clear();
  }
  h.on.store(enabled);
}

/* ---- pools -------------------------------------------------------------------------------------- */

int XsegAllocator::incref_pool(DeviceIndex dev, MempoolId_t id) {
  Pools& ps = pools();
  std::lock_guard<std::mutex> g(ps.mu);
  PoolRec& r = ps.open[{dev, id}];
  if (r.use_count == 0) {
    int rc = xseg_pool_create(dev, &r.xid);
    if (rc != 0) {
      ps.open.erase({dev, id});
      TORCH_CHECK(false, "xseg: ", xseg_error());
    }
    ps.by_xid[{dev, r.xid}] = id;
  }
  r.use_count++;
  return r.xid;
}

void XsegAllocator::beginAllocateToPool(DeviceIndex dev, MempoolId_t id, std::function<bool(cudaStream_t)> filter) {
  check_dev(dev);
  int xid = incref_pool(dev, id);
  Device& d = g_dev[dev];
  {
    std::lock_guard<std::mutex> g(d.mu);
    for (auto& r : d.routes)
      TORCH_CHECK(r.id != id, "xseg: beginAllocateToPool: already allocating to pool (", id.first, ", ", id.second,
                  ")");
    d.routes.push_back({id, xid, std::move(filter)});
    d.nroutes.store(static_cast<int>(d.routes.size()), std::memory_order_release);
  }
  /* While allocations are routed, a capture may be underway: xseg makes no
   * event call until the route ends (torch's own allocator does the same). */
  TORCH_CHECK(xseg_capture_begin(dev) == 0, "xseg: ", xseg_error());
}

void XsegAllocator::endAllocateToPool(DeviceIndex dev, MempoolId_t id) {
  check_dev(dev);
  Device& d = g_dev[dev];
  {
    std::lock_guard<std::mutex> g(d.mu);
    auto it = std::find_if(d.routes.begin(), d.routes.end(), [&](const Route& r) { return r.id == id; });
    TORCH_CHECK(it != d.routes.end(), "xseg: endAllocateToPool: not allocating to pool (", id.first, ", ", id.second,
                ")");
    d.routes.erase(it);
    d.nroutes.store(static_cast<int>(d.routes.size()), std::memory_order_release);
  }
  TORCH_CHECK(xseg_capture_end(dev) == 0, "xseg: ", xseg_error());
}

void XsegAllocator::releasePool(DeviceIndex dev, MempoolId_t id) {
  Pools& ps = pools();
  std::lock_guard<std::mutex> g(ps.mu);
  auto it = ps.open.find({dev, id});
  TORCH_CHECK(it != ps.open.end(), "xseg: releasePool: no pool (", id.first, ", ", id.second, ")");
  if (--it->second.use_count > 0) return;
  /* Closed: no more allocations; its free memory is the device's again, and
   * blocks still live come back to it as they are freed. */
  TORCH_CHECK(xseg_pool_release(dev, it->second.xid) == 0, "xseg: ", xseg_error());
  ps.open.erase(it);
}

std::shared_ptr<CCA::AllocatorState> XsegAllocator::getCheckpointState(DeviceIndex dev, MempoolId_t id) {
  auto st = std::make_shared<PoolState>();
  st->dev = dev;
  st->id = id;
  st->xid = pool_xid(dev, id);
  st->live = live_blocks(dev, st->xid);
  return st;
}

/* Free every live block of the pool and allocate the checkpoint's blocks
 * again at their addresses; the pool's pages stay mapped all along (an
 * open pool keeps them), so the addresses are free once the rest is. */
CCA::CheckpointDelta XsegAllocator::setCheckpointPoolState(DeviceIndex dev, std::shared_ptr<CCA::AllocatorState> as) {
  auto st = std::dynamic_pointer_cast<PoolState>(as);
  TORCH_CHECK(st && st->dev == dev, "xseg: setCheckpointPoolState: a state from another allocator or device");
  TORCH_CHECK(pool_xid(dev, st->id) == st->xid, "xseg: setCheckpointPoolState: the pool was released since");
  CCA::CheckpointDelta delta;
  for (auto& b : live_blocks(dev, st->xid)) {
    void* p = reinterpret_cast<void*>(b.addr);
    if (history().on.load()) note_free(p);
    TORCH_CHECK(xseg_free(p) == 0, "xseg: ", xseg_error());
    delta.ptrs_freed.push_back(p);
  }
  for (auto& b : st->live) {
    void* p = xseg_malloc_at(reinterpret_cast<void*>(b.addr), b.size, dev, static_cast<xseg_stream_t>(b.stream),
                             st->xid);
    TORCH_CHECK(p, "xseg: setCheckpointPoolState: ", xseg_error());
    delta.dataptrs_allocd.emplace_back(p, p, &xseg_raw_delete, c10::Device(c10::DeviceType::CUDA, dev));
  }
  return delta;
}

void XsegAllocator::enablePeerAccess(DeviceIndex dev, DeviceIndex dev_to_access) {
  /* dev reads dev_to_access's memory: the runtime's peer access for
   * cudaMalloc'd memory, and xseg's mappings of dev_to_access for dev. */
  {
    c10::cuda::CUDAGuard guard(dev);
    cudaError_t err = cudaDeviceEnablePeerAccess(dev_to_access, 0);
    if (err == cudaErrorPeerAccessAlreadyEnabled)
      (void)cudaGetLastError();
    else
      C10_CUDA_CHECK(err);
  }
  TORCH_CHECK(xseg_enable_peer_access(dev_to_access, dev) == 0, "xseg: ", xseg_error());
}

/* ---- sharing with other processes --------------------------------------------------------------- */

CCA::ShareableHandle XsegAllocator::shareIpcHandle(void* ptr) {
  std::vector<unsigned char> buf(4096);
  size_t len = buf.size(), offset = 0;
  int rc = xseg_ipc_export(ptr, buf.data(), &len, &offset);
  if (rc == XSEG_ERANGE) {
    buf.resize(len);
    rc = xseg_ipc_export(ptr, buf.data(), &len, &offset);
  }
  TORCH_CHECK(rc == 0, "xseg: sharing CUDA memory with another process: ", xseg_error());
  return {static_cast<ptrdiff_t>(offset), std::string(reinterpret_cast<char*>(buf.data()), len)};
}

std::shared_ptr<void> XsegAllocator::getIpcDevPtr(std::string handle) {
  void* base = nullptr;
  int rc = xseg_ipc_open(handle.data(), handle.size(), c10::cuda::current_device(), &base);
  TORCH_CHECK(rc == 0, "xseg: opening CUDA memory shared by another process: ", xseg_error());
  return std::shared_ptr<void>(base, [](void* p) {
    if (xseg_ipc_close(p) != 0) std::fprintf(stderr, "xseg: closing shared CUDA memory: %s\n", xseg_last_error());
  });
}

/* ---- installation --------------------------------------------------------------------------------- */

std::shared_ptr<XsegAllocator>& instance() {
  /* Leaked on purpose: tensors (cuBLAS workspaces) are freed by static
   * destructors at exit, after a static shared_ptr would be gone. */
  static auto* sp = new std::shared_ptr<XsegAllocator>();
  return *sp;
}

/* Make xseg torch's CUDA allocator; refused once torch's own is in use. */
void install() {
  auto& sp = instance();
  if (sp && CCA::get() == sp.get()) return;
  if (!sp) sp = std::make_shared<XsegAllocator>();
  torch::cuda::CUDAPluggableAllocator::changeCurrentAllocator(sp);
  c10::SetAllocator(c10::DeviceType::CUDA, sp.get(), /*priority*/ 1);
}

bool installed() { return instance() && CCA::get() == instance().get(); }

/* For tests without a GPU (xseg's host backend): the allocation path and
 * the statistics mapping, called as torch calls them. */
uintptr_t test_alloc(size_t size, int device) { return reinterpret_cast<uintptr_t>(alloc_on(size, device, nullptr)); }
void test_free(uintptr_t p) { xseg_raw_delete(reinterpret_cast<void*>(p)); }

pybind11::dict stat_dict(const c10::CachingAllocator::Stat& s) {
  pybind11::dict d;
  d["current"] = s.current;
  d["peak"] = s.peak;
  d["allocated"] = s.allocated;
  d["freed"] = s.freed;
  return d;
}

/* getDeviceStats as a nested dict with torch.cuda.memory_stats_as_nested_dict's keys. */
pybind11::dict test_stats(int device) {
  if (!instance()) instance() = std::make_shared<XsegAllocator>();
  CDA::DeviceStats s = instance()->getDeviceStats(static_cast<DeviceIndex>(device));
  pybind11::dict out;
  const char* types[3] = {"all", "small_pool", "large_pool"};
  auto arr = [&](const char* name, const c10::CachingAllocator::StatArray& a) {
    pybind11::dict d;
    for (int i = 0; i < 3; i++) d[types[i]] = stat_dict(a[i]);
    out[name] = d;
  };
  arr("allocation", s.allocation);
  arr("segment", s.segment);
  arr("active", s.active);
  arr("inactive_split", s.inactive_split);
  arr("allocated_bytes", s.allocated_bytes);
  arr("reserved_bytes", s.reserved_bytes);
  arr("active_bytes", s.active_bytes);
  arr("inactive_split_bytes", s.inactive_split_bytes);
  arr("requested_bytes", s.requested_bytes);
  out["oversize_allocations"] = stat_dict(s.oversize_allocations);
  out["oversize_segments"] = stat_dict(s.oversize_segments);
  out["num_alloc_retries"] = s.num_alloc_retries;
  out["num_ooms"] = s.num_ooms;
  out["num_sync_all_streams"] = s.num_sync_all_streams;
  out["num_device_alloc"] = s.num_device_alloc;
  out["num_device_free"] = s.num_device_free;
  out["max_split_size"] = s.max_split_size;
  return out;
}

/* ns per allocate + free of n bytes through torch's current CUDA allocator
 * interface (what at::empty calls), after a warm-up: the allocator's own
 * cost without Python's, whichever allocator is current. */
double alloc_pair_ns(size_t n, int64_t reps) {
  CCA::CUDAAllocator* a = CCA::get();
  for (int i = 0; i < 1000; i++) a->allocate(n);
  auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < reps; i++) a->allocate(n); /* the DataPtr frees at once */
  auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / static_cast<double>(reps);
}

} // namespace xs_torch

PYBIND11_MODULE(_torch, m) {
  m.doc() = "xseg as PyTorch's native CUDA allocator (python/native/xseg_torch.cc)";
  m.attr("TORCH_VERSION") = XSEG_TORCH_BUILT_AGAINST; /* torch.__version__ at build time */
  m.def("install", [] {
    try {
      xs_torch::install();
    } catch (const c10::Error& e) {
      throw std::runtime_error(e.what_without_backtrace());
    }
  });
  m.def("installed", &xs_torch::installed);
  m.def("_test_alloc", [](size_t size, int device) {
    try {
      return xs_torch::test_alloc(size, device);
    } catch (const c10::OutOfMemoryError& e) {
      PyErr_SetString(PyExc_MemoryError, e.what_without_backtrace());
      throw pybind11::error_already_set();
    } catch (const c10::Error& e) {
      throw std::runtime_error(e.what_without_backtrace());
    }
  });
  m.def("_test_free", &xs_torch::test_free);
  m.def("_alloc_pair_ns", &xs_torch::alloc_pair_ns, pybind11::call_guard<pybind11::gil_scoped_release>());
  m.def("_test_stats", &xs_torch::test_stats);
}

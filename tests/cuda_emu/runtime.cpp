// The CUDA emulator's runtime: the fiber scheduler behind ::emu::launch, and the CUDA runtime
// API calls the library makes (memory is host memory). One stream's order is kept lazily:
// asynchronous copies and memsets wait in a queue until the stream's next kernel or library
// call, or a synchronising call, runs them, so the host reading a copy's destination before
// synchronising, or rewriting a pinned source before the copy ran, sees what it would see on
// a GPU that had not got there yet.
// One emulated device shaped like an H100 (compute capability 9.0, 227 KB of opt-in shared
// memory per block); LIBNN_CUDA_EMU_MEMORY (bytes, default 4 GiB) sets its memory size. Its
// memory is inaccessible to host code outside kernels, copies and library calls (DeviceAccess;
// LIBNN_CUDA_EMU_PROTECT=0 lifts that).
#include <execinfo.h>
#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cuda_emu.h"

// Switching between fibers. glibc's swapcontext saves and restores the signal mask, a system
// call at every switch, and the emulator switches at every barrier and warp collective of
// every thread. On x86-64 we switch the System V ABI's callee-saved registers, the SSE and
// x87 control words and the stack pointer ourselves (the compiler saves the rest around the
// call); elsewhere, and where CET shadow stacks may be on (the hand-made return would break
// them), ucontext.
#if defined(__x86_64__) && !(defined(__CET__) && (__CET__ & 2))
#define LIBNN_EMU_OWN_SWITCH 1
// emu_fiber_switch(save, to): pushes the registers, stores the stack pointer in *save, takes
// `to` as the stack pointer and pops what was pushed there.
asm(R"(
  .text
  .p2align 4
  .globl emu_fiber_switch
  .hidden emu_fiber_switch
  .type emu_fiber_switch, @function
emu_fiber_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size emu_fiber_switch, .-emu_fiber_switch
)");
extern "C" __attribute__((visibility("hidden"))) void emu_fiber_switch(void** save, void* to);
#else
#define LIBNN_EMU_OWN_SWITCH 0
#endif

namespace emu {

Coords coords;

namespace {

enum class State { ready, block_wait, warp_wait, done, trapped };

// Where a suspended fiber (or the scheduler) resumes.
struct Context {
#if LIBNN_EMU_OWN_SWITCH
  void* sp = nullptr;
#else
  ucontext_t uc;
#endif
};
// Saves the running context in `from` and resumes `to`.
void jump(Context& from, Context& to) {
#if LIBNN_EMU_OWN_SWITCH
  emu_fiber_switch(&from.sp, to.sp);
#else
  swapcontext(&from.uc, &to.uc);
#endif
}
// Makes `c` start `entry` (which must never return) on the stack [stack, stack + size).
void prepare(Context& c, char* stack, size_t size, void (*entry)()) {
#if LIBNN_EMU_OWN_SWITCH
  // emu_fiber_switch's frame below a return address into `entry`, placed so that `entry`
  // starts with the stack pointer 8 past a 16-byte boundary, as after a call
  auto top = reinterpret_cast<uintptr_t>(stack + size) & ~uintptr_t(15);
  auto* frame = reinterpret_cast<uint64_t*>(top - 16 - 7 * 8);
  uint32_t csr[2];
  asm volatile("stmxcsr %0\n\tfnstcw %1" : "=m"(csr[0]), "=m"(csr[1]));
  std::memcpy(&frame[0], csr, 8);                   // the control words
  for (int i = 1; i < 7; ++i) frame[i] = 0;         // r15 .. rbp
  frame[7] = reinterpret_cast<uint64_t>(entry);     // the return address
  frame[8] = 0;                                     // entry's own (it never returns)
  c.sp = frame;
#else
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack;
  c.uc.uc_stack.ss_size = size;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, entry, 0);
#endif
}

struct Fiber {
  Context ctx;
  uint3 tid;
  State state = State::ready;
  unsigned mask = 0;
  uint64_t value = 0, result = 0;
  int src = -1;
  const char* barrier_file = nullptr;  // the __syncthreads it waits at
  int barrier_line = 0;
};

constexpr size_t kStack = 256 * 1024;
constexpr size_t kMaxSharedOptin = 232448;  // an H100's, per block
constexpr size_t kDefaultShared = 48 * 1024;

struct Grid {
  std::vector<Fiber> fibers;
  std::vector<std::vector<char>> stacks;
  Context scheduler;
  // fibers not done, and those of them waiting at __syncthreads (kept as the states change,
  // so an arrival at a barrier costs no pass over the block)
  int live = 0, waiting = 0;
  const std::function<void()>* body = nullptr;
  int current = 0;
  std::string error;
  // the launch's dynamic shared memory: smem_bytes from a 128-byte boundary inside smem (the
  // hardware aligns it at least that well; WMMA tiles need 32)
  std::vector<unsigned char> smem;
  size_t smem_bytes = 0;
  // Without an opt-in, static and dynamic shared memory together get 48 KB (the hardware's
  // default for cudaFuncAttributeMaxDynamicSharedMemorySize is 48 KB less the static size):
  // the static variables a block has touched so far, counted as they are first filled.
  bool smem_opted_in = false;
  size_t static_bytes = 0;
  uint64_t static_block = 0;  // the block static_bytes counts
  unsigned char* smem_base() {
    const uintptr_t p = reinterpret_cast<uintptr_t>(smem.data());
    return smem.data() + ((128 - p % 128) % 128);
  }
};
Grid grid_state;
uint64_t block_serial = 0;                  // counts the blocks run, so each is told apart
std::map<void*, uint64_t> shared_filled;    // static shared variable -> block that filled it
std::mutex launch_mutex;
cudaError_t last_error = cudaSuccess;
std::map<const void*, int> smem_optin;  // kernel -> bytes allowed by cudaFuncSetAttribute

void fail(Grid& g, std::string what) {
  if (g.error.empty()) g.error = std::move(what);
}

Fiber& self() { return grid_state.fibers[grid_state.current]; }

void switch_out() {
  Fiber& f = self();
  jump(f.ctx, grid_state.scheduler);
}
// Leaves the running fiber for good.
[[noreturn]] void leave() {
  Context gone;
  jump(gone, grid_state.scheduler);
  std::abort();  // not reached: nothing resumes `gone`
}

// Releases the block barrier when every live thread waits at it.
void try_release_block() {
  Grid& g = grid_state;
  if (g.waiting == 0 || g.waiting != g.live) return;
  const Fiber* first = nullptr;
  for (auto& f : g.fibers) {
    if (f.state != State::block_wait) continue;
    if (!first) first = &f;
    if (f.barrier_line != first->barrier_line || std::strcmp(f.barrier_file, first->barrier_file)) {
      fail(g, std::string("threads of a block wait at different __syncthreads: ") +
                  first->barrier_file + ":" + std::to_string(first->barrier_line) + " and " +
                  f.barrier_file + ":" + std::to_string(f.barrier_line));
      return;
    }
  }
  for (auto& f : g.fibers)
    if (f.state == State::block_wait) f.state = State::ready;
  g.waiting = 0;
}

// Completes the warp collective lane `lane` of warp `w` waits at, if all its lanes arrived.
void try_release_warp(int w, unsigned mask) {
  Grid& g = grid_state;
  const int n = int(g.fibers.size()), first = w * 32;
  for (int l = 0; l < 32; ++l) {
    if (!(mask >> l & 1u)) continue;
    if (first + l >= n) {
      fail(g, "a warp collective's mask names lane " + std::to_string(l) + " of warp " +
                  std::to_string(w) + ", which the block does not have");
      return;
    }
    const Fiber& f = g.fibers[first + l];
    if (f.state != State::warp_wait) return;  // not arrived yet (a deadlock shows later)
    if (f.mask != mask) {
      fail(g, "lanes of warp " + std::to_string(w) + " reach a warp collective with different masks");
      return;
    }
  }
  for (int l = 0; l < 32; ++l) {
    if (!(mask >> l & 1u)) continue;
    Fiber& f = g.fibers[first + l];
    if (f.src < 0) {
      f.result = f.value;
    } else if (f.src < first || f.src >= first + 32 || !(mask >> (f.src - first) & 1u)) {
      fail(g, "lane " + std::to_string(l) + " of warp " + std::to_string(w) +
                  " reads lane " + std::to_string(f.src - first) + ", which is not in the mask");
      return;
    } else {
      f.result = g.fibers[f.src].value;
    }
    f.state = State::ready;
  }
}

void fiber_main() {
  Grid& g = grid_state;
  (*g.body)();
  g.fibers[g.current].state = State::done;
  --g.live;
  try_release_block();
  leave();
}

std::string describe_states(const Grid& g) {
  size_t counts[5] = {};
  for (auto& f : g.fibers) ++counts[int(f.state)];
  return std::to_string(counts[1]) + " threads at __syncthreads, " + std::to_string(counts[2]) +
         " at a warp collective, " + std::to_string(counts[3]) + " finished";
}

// LIBNN_CUDA_EMU_ORDER=reverse runs the blocks of a grid, and the threads of a block between
// barriers, last to first. The hardware promises no order, so a kernel whose result depends
// on it (a block reading another block's output, a thread reading another thread's shared
// memory without a barrier between) gives different results in the two orders.
bool reverse_order() {
  static const bool r = [] {
    const char* e = std::getenv("LIBNN_CUDA_EMU_ORDER");
    return e && std::string(e) == "reverse";
  }();
  return r;
}

void run_block(dim3 block) {
  Grid& g = grid_state;
  const int n = int(block.x * block.y * block.z);
  g.fibers.assign(n, Fiber{});
  g.live = n;
  g.waiting = 0;
  if (g.stacks.size() < size_t(n)) g.stacks.resize(n);
  for (int i = 0; i < n; ++i) {
    Fiber& f = g.fibers[i];
    f.tid = uint3{unsigned(i) % block.x, unsigned(i) / block.x % block.y,
                  unsigned(i) / (block.x * block.y)};
    if (g.stacks[i].empty()) g.stacks[i].resize(kStack);
    prepare(f.ctx, g.stacks[i].data(), kStack, fiber_main);
  }
  std::memset(g.smem_base(), 0xff, g.smem_bytes);  // uninitialised shared memory reads NaN
  ++block_serial;  // and so do static shared variables (fresh_shared)
  // Warp by warp: a warp runs as far as it can (through its own collectives) before the next
  // one starts, as if it were far ahead of the others, so a warp that overwrites shared
  // memory another warp has yet to read, with no barrier between, is caught.
  const bool reverse = reverse_order();
  const int warps = (n + 31) / 32;
  for (;;) {
    bool ran = false, live = false;
    for (int wk = 0; wk < warps; ++wk) {
      const int w = reverse ? warps - 1 - wk : wk;
      const int lanes = std::min(32, n - w * 32);
      for (bool progress = true; progress;) {
        progress = false;
        for (int lk = 0; lk < lanes; ++lk) {
          const int i = w * 32 + (reverse ? lanes - 1 - lk : lk);
          Fiber& f = g.fibers[i];
          if (f.state != State::done && f.state != State::trapped) live = true;
          if (f.state != State::ready) continue;
          g.current = i;
          coords.thread = f.tid;
          jump(g.scheduler, f.ctx);
          ran = progress = true;
          if (!g.error.empty()) return;
        }
      }
    }
    if (!live) return;
    if (!ran) {
      fail(g, "deadlock in block (" + std::to_string(coords.block.x) + ", " +
                  std::to_string(coords.block.y) + ", " + std::to_string(coords.block.z) +
                  "): " + describe_states(g) + " (a barrier some threads never reach)");
      return;
    }
  }
}

}  // namespace

unsigned char* dynamic_smem() { return grid_state.smem_base(); }

thread_local int host_pointer_arg = -1;
void note_host_pointer_arg(int index) {
  if (host_pointer_arg < 0) host_pointer_arg = index;
}

void fresh_shared(void* p, size_t bytes) {
  uint64_t& filled = shared_filled[p];
  if (filled == block_serial) return;
  std::memset(p, 0xff, bytes);
  filled = block_serial;
  Grid& g = grid_state;
  if (g.static_block != block_serial) g.static_block = block_serial, g.static_bytes = 0;
  g.static_bytes += bytes;
  if (!g.smem_opted_in && g.smem_bytes + g.static_bytes > kDefaultShared)
    trap(("static (" + std::to_string(g.static_bytes) + " bytes so far) and dynamic (" +
          std::to_string(g.smem_bytes) + " bytes) shared memory exceed the 48 KB a kernel gets "
          "without the opt-in (cudaFuncSetAttribute)").c_str());
}

void syncthreads(const char* file, int line) {
  Fiber& f = self();
  f.state = State::block_wait;
  ++grid_state.waiting;
  f.barrier_file = file;
  f.barrier_line = line;
  try_release_block();
  if (f.state == State::block_wait) switch_out();
  if (!grid_state.error.empty()) trap("");
}

uint64_t warp_exchange(unsigned mask, uint64_t value, int src) {
  Fiber& f = self();
  const int index = grid_state.current, lane = index % 32;
  if (!(mask >> lane & 1u)) {
    fail(grid_state, "a lane calls a warp collective whose mask leaves it out");
    trap("bad warp mask");
  }
  f.state = State::warp_wait;
  f.mask = mask;
  f.value = value;
  f.src = src < 0 ? -1 : index - lane + src;
  try_release_warp(index / 32, mask);
  if (f.state == State::warp_wait) switch_out();
  if (!grid_state.error.empty()) trap("");
  return f.result;
}

void trap(const char* what) {
  Grid& g = grid_state;
  if (what && *what) fail(g, what);
  g.fibers[g.current].state = State::trapped;
  leave();
}

// Kernels launched with a valid configuration (libnn_cuda_emu_kernel_launches, found with
// dlsym): what a test counts to see that a fused path ran, where its values equal the
// composition's.
std::atomic<unsigned long long> kernel_launches{0};
std::map<std::string, unsigned long long> launches_at;  // by site, under launch_mutex
// LIBNN_CUDA_EMU_LAUNCHES=1: a program prints its count at exit (launches per training step:
// the difference between two runs of different lengths); =sites also each launch site's
// count, most first (which kernels a step runs, and how often).
struct LaunchReport {
  ~LaunchReport() {
    const char* e = std::getenv("LIBNN_CUDA_EMU_LAUNCHES");
    const std::string v = e ? e : "";
    if (v != "1" && v != "sites") return;
    std::fprintf(stderr, "[cuda-emu] %llu kernel launches\n", kernel_launches.load());
    if (v != "sites") return;
    std::vector<std::pair<unsigned long long, std::string>> sites;
    for (const auto& [where, n] : launches_at) sites.emplace_back(n, where);
    std::sort(sites.begin(), sites.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first > b.first : a.second < b.second;
    });
    for (const auto& [n, where] : sites)
      std::fprintf(stderr, "[cuda-emu] %10llu  %s\n", n, where.c_str());
  }
} launch_report;

void launch(dim3 grid, dim3 block, size_t smem, cudaStream_t, const void* kernel,
            const char* where, const std::function<void()>& body) {
  run_queued();  // the stream's earlier copies come first
  std::lock_guard<std::mutex> lock(launch_mutex);
  DeviceAccess access;
  auto bad = [](const std::string& why) {
    std::fprintf(stderr, "[cuda-emu] launch failed: %s\n", why.c_str());
    last_error = cudaErrorInvalidConfiguration;
  };
  if (host_pointer_arg >= 0) {
    const int i = host_pointer_arg;
    host_pointer_arg = -1;
    bad("kernel argument " + std::to_string(i) + " points to host memory");
    last_error = cudaErrorIllegalAddress;
    return;
  }
  const uint64_t threads = uint64_t(block.x) * block.y * block.z;
  if (threads == 0 || threads > 1024 || block.z > 64)
    return bad("block of " + std::to_string(block.x) + " x " + std::to_string(block.y) + " x " +
               std::to_string(block.z) + " threads");
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 0x7fffffffu || grid.y > 65535 ||
      grid.z > 65535)
    return bad("grid of " + std::to_string(grid.x) + " x " + std::to_string(grid.y) + " x " +
               std::to_string(grid.z) + " blocks");
  if (smem > kDefaultShared) {
    auto it = kernel ? smem_optin.find(kernel) : smem_optin.end();
    if (smem > kMaxSharedOptin || it == smem_optin.end() || size_t(it->second) < smem) {
      last_error = cudaErrorInvalidValue;
      std::fprintf(stderr, "[cuda-emu] launch failed: %zu bytes of dynamic shared memory "
                           "without the opt-in (cudaFuncSetAttribute) for that much\n", smem);
      return;
    }
  }
  ++kernel_launches;
  ++launches_at[where ? where : "?"];
  Grid& g = grid_state;
  g.body = &body;
  g.error.clear();
  {
    auto it = kernel ? smem_optin.find(kernel) : smem_optin.end();
    g.smem_opted_in = it != smem_optin.end() && it->second > 0;
  }
  g.smem.assign(smem + 128, 0);
  g.smem_bytes = smem;
  coords.block_dim = block;
  coords.grid_dim = grid;
  const uint64_t blocks = uint64_t(grid.x) * grid.y * grid.z;
  for (uint64_t k = 0; k < blocks; ++k) {
    const uint64_t b = reverse_order() ? blocks - 1 - k : k;
    const unsigned x = unsigned(b % grid.x), y = unsigned(b / grid.x % grid.y),
                   z = unsigned(b / (uint64_t(grid.x) * grid.y));
    coords.block = uint3{x, y, z};
    run_block(block);
    if (!g.error.empty()) {
      std::fprintf(stderr, "[cuda-emu] kernel failed in block (%u, %u, %u): %s\n", x, y, z,
                   g.error.c_str());
      last_error = cudaErrorLaunchFailure;
      return;
    }
  }
  check_guards("a kernel");
}

}  // namespace emu

// ---- the runtime API the library calls ----------------------------------------------------
namespace {

size_t device_memory() {
  static const size_t bytes = [] {
    const char* e = std::getenv("LIBNN_CUDA_EMU_MEMORY");
    return e ? size_t(std::strtoull(e, nullptr, 10)) : size_t(4) << 30;
  }();
  return bytes;
}
std::mutex memory_mutex;
// Each allocation sits between two guard zones of kGuard bytes of kGuardByte, checked after
// every launch, every cuBLAS/cuDNN computation and at cudaFree: a write past either end of a
// buffer stops the program with a message naming the allocation and the call after which it
// was found (with LIBNN_NO_MEMORY_CACHING=1, every tensor is one). An error code could be
// cleared by the caller's next cudaGetLastError. The guard bytes read as NaN in every float
// type and as -1 in every integer one, so a read past the end shows too.
constexpr size_t kGuard = 256;
constexpr unsigned char kGuardByte = 0xff;
std::map<void*, size_t> allocations;  // user pointer -> bytes
size_t in_use = 0;
int current_device = 0;

// Every device allocation lies in one reserved range of the address space, kept PROT_NONE
// except while a DeviceAccess lives: host code that dereferences a device pointer (on a GPU a
// fault, or garbage) gets SIGSEGV here, with a message naming it. Blocks are first fit in
// address order, neighbours merged when freed, so the range in use stays as compact as the
// allocations; it asks for huge pages, which keep the two mprotect calls of a launch cheap
// (a toggle of 256 MiB took 15 us with them, 6 ms without, on the 2-core Xeon).
constexpr size_t kChunk = size_t(2) << 20;  // a huge page: protection changes round to it
struct Arena {
  char* base = nullptr;
  size_t reserved = 0;
  size_t top = 0;                        // the end of the highest block handed out so far
  std::map<size_t, size_t> free_blocks;  // offset -> bytes, all below top
  bool protect = true;
};
Arena arena;
std::mutex access_mutex;  // (taken after memory_mutex, never before it)
int access_depth = 0;
size_t open_to = 0;  // [base, base + open_to) is readable and writable

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }
void set_protection(size_t from, size_t to, int prot) {
  if (to > from && mprotect(arena.base + from, to - from, prot) != 0) {
    std::perror("[cuda-emu] mprotect of device memory");
    std::abort();
  }
}

struct sigaction previous_segv;
bool segv_reported = false;
// A fault inside the range is host code touching device memory: say so, with the stack, then
// let the handler installed before ours (Catch2's names the test case) or the default end it.
void on_segv(int sig, siginfo_t* si, void*) {
  const char* a = static_cast<const char*>(si->si_addr);
  if (!segv_reported && si->si_code > 0 && a >= arena.base && a < arena.base + arena.reserved) {
    static const char msg[] =
        "[cuda-emu] host code touched device memory: a device pointer was dereferenced outside "
        "a kernel, a copy or a library call (on a GPU: a fault or garbage). Address 0x";
    (void)!write(2, msg, sizeof msg - 1);
    char hex[20];
    int n = 0;
    for (uintptr_t v = reinterpret_cast<uintptr_t>(a); n == 0 || v; v >>= 4) hex[n++] = "0123456789abcdef"[v & 15];
    for (int i = 0; i < n / 2; ++i) std::swap(hex[i], hex[n - 1 - i]);
    (void)!write(2, hex, size_t(n));
    static const char stack[] = "; the stack (addr2line -e FILE OFFSET names a frame):\n";
    (void)!write(2, stack, sizeof stack - 1);
    void* frames[48];
    backtrace_symbols_fd(frames, backtrace(frames, 48), 2);
  }
  if (segv_reported) {
    signal(sig, SIG_DFL);
  } else {
    segv_reported = true;
    sigaction(sig, &previous_segv, nullptr);
  }
}
// Keeps on_segv the first handler (a test framework may install its own per test case).
void install_segv_handler() {
  struct sigaction cur;
  sigaction(SIGSEGV, nullptr, &cur);
  if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_segv) return;
  struct sigaction sa {};
  sa.sa_sigaction = on_segv;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  previous_segv = cur;
  sigaction(SIGSEGV, &sa, nullptr);
}

void init_arena() {
  if (arena.base) return;
  const char* e = std::getenv("LIBNN_CUDA_EMU_PROTECT");
  arena.protect = !(e && std::string(e) == "0");
  arena.reserved = round_up(std::max(size_t(64) << 30, 2 * device_memory()), kChunk);
  void* p = mmap(nullptr, arena.reserved + kChunk, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    std::perror("[cuda-emu] reserving the device's address range");
    std::abort();
  }
  arena.base = reinterpret_cast<char*>(round_up(reinterpret_cast<uintptr_t>(p), kChunk));
  madvise(arena.base, arena.reserved, MADV_HUGEPAGE);  // (advice: ignored where unsupported)
  if (!arena.protect) set_protection(0, arena.reserved, PROT_READ | PROT_WRITE);
  void* warm[1];
  backtrace(warm, 1);  // loads what backtrace needs now, not in the signal handler
}

// The block an allocation of n bytes takes: the bytes between two guard zones, whole zones.
size_t block_bytes(size_t n) { return round_up(kGuard + n + kGuard, kGuard); }

// A block of `bytes` (block_bytes) in the range, or null when it is full.
char* arena_alloc(size_t bytes) {
  init_arena();
  for (auto it = arena.free_blocks.begin(); it != arena.free_blocks.end(); ++it) {
    if (it->second < bytes) continue;
    const size_t off = it->first, left = it->second - bytes;
    arena.free_blocks.erase(it);
    if (left) arena.free_blocks[off + bytes] = left;
    return arena.base + off;
  }
  if (arena.top + bytes > arena.reserved) return nullptr;
  const size_t off = arena.top;
  std::lock_guard<std::mutex> lock(access_mutex);
  arena.top += bytes;
  if (arena.protect && access_depth > 0 && round_up(arena.top, kChunk) > open_to) {
    set_protection(open_to, round_up(arena.top, kChunk), PROT_READ | PROT_WRITE);
    open_to = round_up(arena.top, kChunk);
  }
  return arena.base + off;
}
void arena_free(char* block, size_t bytes) {
  size_t off = size_t(block - arena.base);
  auto next = arena.free_blocks.lower_bound(off);
  if (next != arena.free_blocks.end() && next->first == off + bytes) {
    bytes += next->second;
    next = arena.free_blocks.erase(next);
  }
  if (next != arena.free_blocks.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == off) {
      off = prev->first;
      bytes += prev->second;
      arena.free_blocks.erase(prev);
    }
  }
  arena.free_blocks[off] = bytes;
}

cudaError_t record(cudaError_t e) {
  if (e != cudaSuccess) emu::last_error = e;
  return e;
}

// Stops the program when a guard zone of the allocation at p was written.
void check_guard(void* p, size_t n, const char* where) {
  unsigned char* front = static_cast<unsigned char*>(p) - kGuard;
  unsigned char* back = static_cast<unsigned char*>(p) + n;
  size_t before = 0, after = 0;
  for (size_t i = 0; i < kGuard; ++i) {
    if (front[i] != kGuardByte) before = std::max(before, kGuard - i);
    if (back[i] != kGuardByte) after = std::max(after, i + 1);
  }
  if (before == 0 && after == 0) return;
  std::fprintf(stderr, "[cuda-emu] %s wrote outside a %zu-byte device allocation (%zu bytes "
               "before its start, %zu past its end)\n", where, n, before, after);
  std::abort();
}

// The calls that make the host wait for the device (synchronisations, an asynchronous copy to
// or from pageable host memory, cudaMemcpy, the frees), counted for tests that a training step waits nowhere
// (libnn_cuda_emu_host_waits, found with dlsym).
std::atomic<unsigned long long> host_waits{0};
void host_wait() {
  ++host_waits;
  emu::run_queued();
}

struct EmuEvent {
  std::chrono::steady_clock::time_point at;
  uint64_t seq = 0;  // the stream operations queued before it
};

// The stream's queued operations, oldest first.
std::mutex stream_mutex;
std::vector<std::function<void()>> pending;
uint64_t queued = 0, done = 0;
void enqueue(std::function<void()> op) {
  std::lock_guard<std::mutex> lock(stream_mutex);
  pending.push_back(std::move(op));
  ++queued;
}

std::map<void*, size_t> pinned;  // cudaMallocHost blocks (under memory_mutex)
// Whether p lies in one of the blocks of `m` (base -> bytes).
bool inside(const std::map<void*, size_t>& m, const void* p) {
  auto it = m.upper_bound(const_cast<void*>(p));
  if (it == m.begin()) return false;
  --it;
  return static_cast<const char*>(p) < static_cast<const char*>(it->first) + it->second;
}

}  // namespace

// Pinned host memory counts: kernels may read it (mapped through unified addressing).
bool emu::is_device_pointer(const void* p) {
  std::lock_guard<std::mutex> lock(memory_mutex);
  auto it = allocations.upper_bound(const_cast<void*>(p));
  if (it != allocations.begin() &&
      static_cast<const char*>(p) <= static_cast<const char*>(std::prev(it)->first) + std::prev(it)->second)
    return true;
  return inside(pinned, p);
}

emu::DeviceAccess::DeviceAccess() {
  std::lock_guard<std::mutex> lock(access_mutex);
  if (access_depth++ == 0 && arena.protect && arena.base) {
    open_to = round_up(arena.top, kChunk);
    set_protection(0, open_to, PROT_READ | PROT_WRITE);
  }
}
emu::DeviceAccess::~DeviceAccess() {
  std::lock_guard<std::mutex> lock(access_mutex);
  if (--access_depth == 0 && arena.protect && arena.base) {
    set_protection(0, open_to, PROT_NONE);
    open_to = 0;
    install_segv_handler();
  }
}

void emu::run_queued() {
  std::lock_guard<std::mutex> lock(stream_mutex);
  if (!pending.empty()) {  // (device memory opened only for work: every launch comes here)
    DeviceAccess access;
    for (auto& op : pending) op();
    pending.clear();
  }
  done = queued;
}

void emu::check_guards(const char* where) {
  DeviceAccess access;
  std::lock_guard<std::mutex> lock(memory_mutex);
  for (auto& [p, n] : allocations) check_guard(p, n, where);
}

extern "C" {

unsigned long long libnn_cuda_emu_host_waits() { return host_waits; }
unsigned long long libnn_cuda_emu_kernel_launches() { return emu::kernel_launches; }

// CUDA_VISIBLE_DEVICES hides the device as the real runtime does when it is set to nothing
// or to an index other than 0 (so the no-GPU paths can be tested here too).
// The emulated driver's CUDA version: LIBNN_CUDA_EMU_DRIVER (as cudaDriverGetVersion gives
// it, 12040 for 12.4; 0: no driver installed), by default the runtime's.
static int emulated_driver_version() {
  const char* v = std::getenv("LIBNN_CUDA_EMU_DRIVER");
  return v && *v ? std::atoi(v) : CUDART_VERSION;
}
cudaError_t cudaDriverGetVersion(int* version) {
  *version = emulated_driver_version();
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* version) {
  *version = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceCount(int* count) {
  // as the runtime does: a driver older than it (or none) is an insufficient driver
  if (emulated_driver_version() < CUDART_VERSION) return record(cudaErrorInsufficientDriver);
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  *count = visible && visible[0] != '0' ? 0 : 1;
  return *count ? cudaSuccess : record(cudaErrorNoDevice);
}
cudaError_t cudaSetDevice(int device) {
  if (device != 0) return record(cudaErrorInvalidDevice);
  current_device = device;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  *device = current_device;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (device != 0) return record(cudaErrorInvalidDevice);
  switch (attr) {
    case cudaDevAttrComputeCapabilityMajor: *value = 9; break;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = int(emu::kMaxSharedOptin); break;
    case cudaDevAttrMultiProcessorCount: *value = 132; break;
    default: return record(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
  if (device != 0) return record(cudaErrorInvalidDevice);
  std::memset(p, 0, sizeof(*p));
  std::snprintf(p->name, sizeof p->name, "libnn CUDA emulator, H100-shaped");
  p->major = 9;
  p->minor = 0;
  p->multiProcessorCount = 132;
  p->sharedMemPerBlockOptin = emu::kMaxSharedOptin;
  p->totalGlobalMem = device_memory();
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  return cudaSuccess;
}
cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaSuccess;
  if (value < 0 || size_t(value) > emu::kMaxSharedOptin) return record(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(emu::launch_mutex);
  emu::smem_optin[func] = value;
  return cudaSuccess;
}
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, const void* func) {
  std::memset(attr, 0, sizeof(*attr));
  {
    std::lock_guard<std::mutex> lock(emu::launch_mutex);
    auto it = emu::smem_optin.find(func);
    attr->maxDynamicSharedSizeBytes = it != emu::smem_optin.end() ? it->second : int(emu::kDefaultShared);
  }
  attr->ptxVersion = 90;
  attr->binaryVersion = 90;
  attr->maxThreadsPerBlock = 1024;
  return cudaSuccess;
}
cudaError_t cudaGetLastError() {
  cudaError_t e = emu::last_error;
  emu::last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return emu::last_error; }
const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
    default: return "unknown error (emulated)";
  }
}
const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
    default: return "cudaErrorUnknown";
  }
}

cudaError_t cudaMalloc(void** p, size_t n) {
  std::lock_guard<std::mutex> lock(memory_mutex);
  if (in_use + n > device_memory()) {
    *p = nullptr;
    return record(cudaErrorMemoryAllocation);
  }
  unsigned char* base = reinterpret_cast<unsigned char*>(arena_alloc(block_bytes(n)));
  if (!base) return record(cudaErrorMemoryAllocation);
  emu::DeviceAccess access;
  std::memset(base, kGuardByte, kGuard);
  std::memset(base + kGuard + n, kGuardByte, kGuard);
  *p = base + kGuard;
  // fresh device memory holds garbage, not zeros: NaN bytes here (the first 64 MiB)
  std::memset(*p, 0xff, std::min(n, size_t(64) << 20));
  allocations[*p] = n;
  in_use += n;
  return cudaSuccess;
}
cudaError_t cudaFree(void* p) {
  if (!p) return cudaSuccess;
  host_wait();  // cudaFree synchronises the device
  std::lock_guard<std::mutex> lock(memory_mutex);
  auto it = allocations.find(p);
  if (it == allocations.end()) return record(cudaErrorInvalidValue);
  {
    emu::DeviceAccess access;
    check_guard(p, it->second, "a kernel or library call (found at cudaFree)");
  }
  arena_free(static_cast<char*>(p) - kGuard, block_bytes(it->second));
  in_use -= it->second;
  allocations.erase(it);
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
  std::lock_guard<std::mutex> lock(memory_mutex);
  *total = device_memory();
  *free_bytes = device_memory() - in_use;
  return cudaSuccess;
}
cudaError_t cudaMallocHost(void** p, size_t n) {
  *p = std::malloc(n ? n : 1);
  if (!*p) return record(cudaErrorMemoryAllocation);
  std::lock_guard<std::mutex> lock(memory_mutex);
  pinned[*p] = n ? n : 1;
  return cudaSuccess;
}
cudaError_t cudaHostAlloc(void** p, size_t n, unsigned) { return cudaMallocHost(p, n); }
cudaError_t cudaFreeHost(void* p) {
  host_wait();  // as cudaFreeHost synchronises
  {
    std::lock_guard<std::mutex> lock(memory_mutex);
    pinned.erase(p);
  }
  std::free(p);
  return cudaSuccess;
}
// As the runtime documents: a copy to pageable host memory returns once it is done, one from
// pageable host memory once the source has been read (staged); any other waits in the
// stream's queue.
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind, cudaStream_t) {
  if (!n) return cudaSuccess;
  bool dst_pageable, src_pageable;
  {
    std::lock_guard<std::mutex> lock(memory_mutex);
    dst_pageable = !inside(allocations, dst) && !inside(pinned, dst);
    src_pageable = !inside(allocations, src) && !inside(pinned, src);
  }
  if (dst_pageable) {
    host_wait();
    emu::DeviceAccess access;
    std::memmove(dst, src, n);
  } else if (src_pageable) {  // (read now, as the runtime stages it: host memory, no access)
    ++host_waits;  // the runtime "may synchronize with the stream" to stage it: counted as a wait
    auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src),
                                                      static_cast<const char*>(src) + n);
    enqueue([dst, staged] { std::memmove(dst, staged->data(), staged->size()); });
  } else {
    enqueue([dst, src, n] { std::memmove(dst, src, n); });
  }
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind) {
  host_wait();
  emu::DeviceAccess access;
  if (n) std::memmove(dst, src, n);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t n, cudaStream_t) {
  if (n) enqueue([p, value, n] { std::memset(p, value, n); });
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  static int dummy;
  *s = reinterpret_cast<cudaStream_t>(&dummy);
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) {
  host_wait();
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() {
  host_wait();
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) {
  *e = reinterpret_cast<cudaEvent_t>(new EmuEvent{});
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete reinterpret_cast<EmuEvent*>(e);
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
  std::lock_guard<std::mutex> lock(stream_mutex);
  reinterpret_cast<EmuEvent*>(e)->at = std::chrono::steady_clock::now();
  reinterpret_cast<EmuEvent*>(e)->seq = queued;
  return cudaSuccess;
}
// Not ready while operations queued before the event wait (not an error: not recorded).
cudaError_t cudaEventQuery(cudaEvent_t e) {
  std::lock_guard<std::mutex> lock(stream_mutex);
  return done >= reinterpret_cast<EmuEvent*>(e)->seq ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaEventSynchronize(cudaEvent_t) {
  host_wait();
  return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  *ms = std::chrono::duration<float, std::milli>(reinterpret_cast<EmuEvent*>(b)->at -
                                                 reinterpret_cast<EmuEvent*>(a)->at)
            .count();
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned) { return cudaSuccess; }

}  // extern "C"

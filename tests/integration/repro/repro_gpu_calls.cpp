// CUDA driver and NCCL calls for the gpu concern's test (live_gpu_test.cpp),
// through libraries loaded as PyTorch loads libcuda: dlopen() by path.
//
//   repro_gpu_calls LIBCUDA LIBNCCL   the stub libraries (tests/integration/gpu_stubs)
//   repro_gpu_calls --nccl LIBNCCL    a real libnccl.so.2: only calls that need no GPU
//   repro_gpu_calls --unseen-return LIBCUDA
//                                     a cuCtxSynchronize left by siglongjmp on SIGUSR1
//                                     (its return never runs), then ("resumed") a launch
//                                     and the same cuCtxSynchronize again
//
// Prints "LOADED pid=N tid=N" once the libraries are mapped, waits for a "go"
// line on stdin, makes its calls, then (stubs) prints "syncing" and calls
// cuCtxSynchronize -- which the stub holds until HT_STUB_CUDA_SYNC_FD gives
// it a byte -- and prints "done" (with HT_STARVE_ON_FD: "starving", then it
// reads that fd instead of synchronizing).
#include <dirent.h>
#include <dlfcn.h>
#include <sys/stat.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <map>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace {

using CUresult = int;
using CUstream = void*;
using CUdeviceptr = unsigned long long;
using ncclComm_t = void*;

// The layout of cuda.h's CUlaunchConfig.
struct LaunchConfig {
  unsigned grid[3], block[3], shared_mem_bytes;
  CUstream stream;
  void* attrs;
  unsigned num_attrs;
};

constexpr uintptr_t kStream = 0x5151;
constexpr uintptr_t kComm = 0x1234;
constexpr int kNcclInt8 = 0, kNcclInt32 = 2, kNcclFloat32 = 7, kNcclSum = 0;

void* open_library(const char* path) {
  void* lib = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
  if (!lib) {
    std::fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
    std::exit(2);
  }
  return lib;
}

template <class F>
F symbol(void* lib, const char* name) {
  void* f = dlsym(lib, name);
  if (!f) {
    std::fprintf(stderr, "dlsym %s: %s\n", name, dlerror());
    std::exit(2);
  }
  return reinterpret_cast<F>(f);
}

void wait_for_go() {
  char c;
  while (read(STDIN_FILENO, &c, 1) == 1 && c != '\n') {
  }
}

void say(const char* line) {
  std::printf("%s\n", line);
  std::fflush(stdout);
}

// A tracer that attaches when it notices the libraries (launch mode re-reads
// the job's mappings every 500 ms) may come after the calls. With
// HT_WAIT_FOR_UPROBES=PID (the tracer) or =1 (any ancestor: launch mode, or a
// test that traces its own child) the calls wait until that tracer holds, for
// every function given, both its entry and its return uprobe (the links its
// fdinfo describes: the file and the function's offset in it). A breakpoint
// in the code is not enough:
// another test's tracer may have probed the same library file, and the return
// probe goes in before the entry probe. Prints "UPROBED" then.

// The file offset of `fn` and its file, as this process maps it.
bool probe_site(const void* fn, std::string& file, uint64_t& offset) {
  FILE* maps = std::fopen("/proc/self/maps", "r");
  if (!maps) return false;
  char line[4096];
  const auto addr = reinterpret_cast<uintptr_t>(fn);
  bool found = false;
  while (!found && std::fgets(line, sizeof line, maps)) {
    unsigned long start = 0, end = 0, off = 0;
    int path_at = 0;
    if (std::sscanf(line, "%lx-%lx %*s %lx %*s %*s %n", &start, &end, &off, &path_at) < 3 || path_at == 0)
      continue;
    if (addr < start || addr >= end) continue;
    file = line + path_at;
    while (!file.empty() && (file.back() == '\n' || file.back() == ' ')) file.pop_back();
    offset = addr - start + off;
    found = !file.empty();
  }
  std::fclose(maps);
  return found;
}

// A uprobe link as its holder's fdinfo describes it (link_type perf).
struct UprobeLink {
  bool uprobe = false;  // a perf-event uprobe or uretprobe link at all
  bool ret = false;
  dev_t dev = 0;
  ino_t ino = 0;
  uint64_t offset = 0;
};

UprobeLink read_uprobe_link(const std::string& fdinfo) {
  UprobeLink out;
  FILE* f = std::fopen(fdinfo.c_str(), "r");
  if (!f) return out;
  char line[4096];
  std::string name, event;
  bool perf = false, has_offset = false;
  while (std::fgets(line, sizeof line, f)) {
    char value[4096] = {};
    unsigned long long offset = 0;
    if (std::sscanf(line, "link_type: %4095s", value) == 1) perf = std::strcmp(value, "perf") == 0;
    if (std::sscanf(line, "name: %4095[^\n]", value) == 1) name = value;
    if (std::sscanf(line, "offset: %llx", &offset) == 1) out.offset = offset, has_offset = true;
    if (std::sscanf(line, "event_type: %4095s", value) == 1) event = value;
  }
  std::fclose(f);
  struct stat st {};
  // The name is as the tracer opened the file (it may go through
  // /proc/PID/root): the file itself is compared.
  if (!perf || !has_offset || (event != "uprobe" && event != "uretprobe") || stat(name.c_str(), &st) != 0)
    return out;
  out.uprobe = true;
  out.ret = event == "uretprobe";
  out.dev = st.st_dev;
  out.ino = st.st_ino;
  return out;
}

// The uprobe links `pid` holds (its fds on anon_inode:bpf_link), read
// through `seen`: each link is read once.
std::vector<UprobeLink> uprobe_links_of(int pid, std::map<std::string, UprobeLink>& seen) {
  std::vector<UprobeLink> out;
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  DIR* d = opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    char target[64] = {};
    std::string fd = dir + "/" + e->d_name;
    if (readlink(fd.c_str(), target, sizeof target - 1) <= 0 ||
        std::strcmp(target, "anon_inode:bpf_link") != 0)
      continue;
    struct stat st {};
    if (stat(fd.c_str(), &st) != 0) continue;
    // The fd's number and the link's inode: a closed and reused fd is read anew.
    const std::string key = std::to_string(pid) + "/" + e->d_name + "@" + std::to_string(st.st_ino);
    auto it = seen.find(key);
    if (it == seen.end())
      it = seen.emplace(key, read_uprobe_link("/proc/" + std::to_string(pid) + "/fdinfo/" + e->d_name)).first;
    if (it->second.uprobe) out.push_back(it->second);
  }
  closedir(d);
  return out;
}

// The tracers HT_WAIT_FOR_UPROBES names: a pid, or every ancestor.
std::vector<int> tracers(const char* setting) {
  if (std::strcmp(setting, "1") != 0) return {std::atoi(setting)};
  std::vector<int> out;
  for (int pid = getppid(); pid > 1 && out.size() < 64;) {
    out.push_back(pid);
    FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r");
    if (!f) break;
    char buf[1024] = {};
    size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    const char* close_paren = std::strrchr(buf, ')');
    if (!n || !close_paren || std::sscanf(close_paren + 1, " %*c %d", &pid) != 1) break;
  }
  return out;
}

void wait_for_uprobes(std::initializer_list<const void*> functions) {
  const char* setting = std::getenv("HT_WAIT_FOR_UPROBES");
  struct Site {
    dev_t dev = 0;
    ino_t ino = 0;
    uint64_t offset = 0;
  };
  std::vector<Site> sites;
  for (const void* f : functions) {
    std::string file;
    Site s;
    struct stat st {};
    if (!probe_site(f, file, s.offset) || stat(file.c_str(), &st) != 0) {
      std::fprintf(stderr, "no mapped file holds function %p\n", f);
      std::exit(3);
    }
    s.dev = st.st_dev;
    s.ino = st.st_ino;
    sites.push_back(s);
  }
  std::map<std::string, UprobeLink> seen;
  for (int i = 0; i < 3000; ++i) {
    std::set<std::tuple<dev_t, ino_t, uint64_t, bool>> probed;  // (file, offset, return)
    for (int pid : tracers(setting))
      for (const UprobeLink& l : uprobe_links_of(pid, seen)) probed.emplace(l.dev, l.ino, l.offset, l.ret);
    bool all = true;
    for (const Site& s : sites)
      all = all && probed.count({s.dev, s.ino, s.offset, false}) &&
            probed.count({s.dev, s.ino, s.offset, true});
    if (all) {
      say("UPROBED");
      return;
    }
    usleep(10'000);
  }
  std::fprintf(stderr, "the tracer has not probed the functions after 30 s\n");
  std::exit(3);
}

void announce() {
  std::printf("LOADED pid=%d tid=%ld\n", getpid(), static_cast<long>(syscall(SYS_gettid)));
  std::fflush(stdout);
}

int real_nccl(const char* libnccl) {
  void* nccl = open_library(libnccl);
  auto group_start = symbol<int (*)()>(nccl, "ncclGroupStart");
  auto group_end = symbol<int (*)()>(nccl, "ncclGroupEnd");
  auto all_reduce =
      symbol<int (*)(const void*, void*, size_t, int, int, ncclComm_t, CUstream)>(nccl, "ncclAllReduce");
  announce();
  wait_for_go();
  group_start();
  group_start();
  group_end();
  // No communicator: NCCL refuses it (ncclInvalidArgument) without touching a GPU.
  float buf[4] = {};
  int ret = all_reduce(buf, buf, 4, kNcclFloat32, kNcclSum, nullptr, reinterpret_cast<CUstream>(kStream));
  std::printf("done ncclAllReduce=%d\n", ret);
  std::fflush(stdout);
  wait_for_go();
  return 0;
}

sigjmp_buf out_of_the_call;

// A call the thread leaves without returning from it: a uretprobe then
// never fires for it, as for a call that began before its return probe was
// attached. The calls after it are the thread's own, not nested in it: a
// launch (another call site), then the same synchronize again (the same call
// site, in the same frame).
int unseen_return(const char* libcuda) {
  void* cuda = open_library(libcuda);
  auto launch = symbol<CUresult (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                    unsigned, CUstream, void**, void**)>(cuda, "cuLaunchKernel");
  auto ctx_synchronize = symbol<CUresult (*)()>(cuda, "cuCtxSynchronize");
  struct sigaction leave {};
  leave.sa_handler = [](int) { siglongjmp(out_of_the_call, 1); };
  sigaction(SIGUSR1, &leave, nullptr);
  announce();
  wait_for_go();
  volatile int rounds = 0;  // kept across the longjmp
  while (rounds < 2) {
    const int round = rounds;
    rounds = round + 1;
    if (sigsetjmp(out_of_the_call, 1) != 0) continue;  // round 0's synchronize, left
    if (round == 1) {
      say("resumed");
      launch(reinterpret_cast<void*>(0x3000), 1, 1, 1, 1, 1, 1, 0, reinterpret_cast<CUstream>(kStream),
             nullptr, nullptr);
    }
    say(round == 0 ? "syncing" : "syncing again");
    ctx_synchronize();
  }
  say("done");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--nccl") == 0) return real_nccl(argv[2]);
  if (argc == 3 && std::strcmp(argv[1], "--unseen-return") == 0) return unseen_return(argv[2]);
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s LIBCUDA LIBNCCL | --nccl LIBNCCL\n", argv[0]);
    return 2;
  }
  void* cuda = open_library(argv[1]);
  void* nccl = open_library(argv[2]);
  auto launch = symbol<CUresult (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                    unsigned, CUstream, void**, void**)>(cuda, "cuLaunchKernel");
  auto launch_ex = symbol<CUresult (*)(const LaunchConfig*, void*, void**, void**)>(cuda, "cuLaunchKernelEx");
  auto memcpy_htod = symbol<CUresult (*)(CUdeviceptr, const void*, size_t)>(cuda, "cuMemcpyHtoD_v2");
  auto memset_d32 = symbol<CUresult (*)(CUdeviceptr, unsigned, size_t)>(cuda, "cuMemsetD32_v2");
  auto ctx_synchronize = symbol<CUresult (*)()>(cuda, "cuCtxSynchronize");
  auto all_reduce =
      symbol<int (*)(const void*, void*, size_t, int, int, ncclComm_t, CUstream)>(nccl, "ncclAllReduce");
  auto bcast = symbol<int (*)(void*, size_t, int, int, ncclComm_t, CUstream)>(nccl, "ncclBcast");
  auto send = symbol<int (*)(const void*, size_t, int, int, ncclComm_t, CUstream)>(nccl, "ncclSend");
  auto group_start = symbol<int (*)()>(nccl, "ncclGroupStart");
  auto group_end = symbol<int (*)()>(nccl, "ncclGroupEnd");
  announce();
  if (std::getenv("HT_WAIT_FOR_UPROBES"))
    wait_for_uprobes({reinterpret_cast<const void*>(launch), reinterpret_cast<const void*>(launch_ex),
                      reinterpret_cast<const void*>(memcpy_htod), reinterpret_cast<const void*>(memset_d32),
                      reinterpret_cast<const void*>(ctx_synchronize),
                      reinterpret_cast<const void*>(all_reduce), reinterpret_cast<const void*>(bcast),
                      reinterpret_cast<const void*>(send), reinterpret_cast<const void*>(group_start),
                      reinterpret_cast<const void*>(group_end)});
  wait_for_go();

  auto stream = reinterpret_cast<CUstream>(kStream);
  auto comm = reinterpret_cast<ncclComm_t>(kComm);
  for (int i = 0; i < 100; ++i)
    launch(reinterpret_cast<void*>(0x1000 + i), 64, 1, 1, 128, 1, 1, 0, stream, nullptr, nullptr);
  LaunchConfig config{{64, 1, 1}, {128, 1, 1}, 0, stream, nullptr, 0};
  launch_ex(&config, reinterpret_cast<void*>(0x2000), nullptr, nullptr);
  static char host[4096];
  for (int i = 0; i < 3; ++i) memcpy_htod(0xd000, host, sizeof host);
  memset_d32(0xd000, 0, 256);  // 1 KiB

  static float grads[1024];
  for (int i = 0; i < 3; ++i) all_reduce(grads, grads, 1024, kNcclFloat32, kNcclSum, comm, stream);
  bcast(host, 64, kNcclInt8, 2, comm, stream);
  group_start();
  group_start();
  send(host, 256, kNcclInt32, 1, comm, stream);
  group_end();  // one group left open, as a rank stuck before its ncclGroupEnd

  // HT_STARVE_ON_FD: instead of waiting for the GPU, the thread that fed it
  // waits on the host (a read that never returns), and the GPU goes idle.
  if (const char* fd = std::getenv("HT_STARVE_ON_FD")) {
    say("starving");
    char c;
    ssize_t n = read(std::atoi(fd), &c, 1);
    std::printf("done read=%zd\n", n);
    return 0;
  }
  say("syncing");
  ctx_synchronize();
  say("done");
  return 0;
}

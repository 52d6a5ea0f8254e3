// The live tracer's module discovery (userspace/collect/mapped_modules.h) on
// a proc root laid out from fixture maps files: maps_gpu_python is a real
// python3 that dlopen()ed the stub libcuda.so.1 and libnccl.so.2 and
// hangtrace's libhangtrace_cupti.so (which pulls in the real libcupti.so.13);
// maps_python_shm is a python3 before any GPU library.
#include "../../userspace/collect/mapped_modules.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "fixture_file.h"
#include "temp_dir.h"

namespace hangtrace {
namespace {

namespace fs = std::filesystem;
using testing::procfs_fixture;

const std::string kCuda = "/work/wt/procfs/build/tests/gpu_stubs/libcuda.so.1";
const std::string kNccl = "/work/wt/procfs/build/tests/gpu_stubs/libnccl.so.2";
const std::string kCupti = "/work/wt/procfs/build/lib/libhangtrace_cupti.so";
constexpr size_t kGpuPythonExecutableMappings = 32;
constexpr uint64_t kMs = 1'000'000;

// ROOT/PID/maps and ROOT/PID/task/TID, as a test says.
struct FakeProc {
  testing::TempDir dir{"ht-mapped-modules"};
  void maps(int pid, const std::string& text) {
    fs::create_directories(dir.path / std::to_string(pid));
    std::ofstream(dir.path / std::to_string(pid) / "maps", std::ios::binary) << text;
  }
  // ROOT/PID/statm: the address space's size in pages.
  void statm(int pid, uint64_t size_pages) {
    fs::create_directories(dir.path / std::to_string(pid));
    std::ofstream(dir.path / std::to_string(pid) / "statm") << size_pages << " 100 50 1 0 200 0\n";
  }
  void thread(int pid, int tid) {
    fs::create_directories(dir.path / std::to_string(pid) / "task" / std::to_string(tid));
  }
  procfs::ProcFs proc() const { return procfs::ProcFs(dir.path.string()); }
};

// A MappedModules whose clock and notices the test holds.
struct Discovery {
  uint64_t now = 0;
  std::vector<std::pair<int, std::string>> noticed;
  MappedModules modules;
  Discovery(ModuleRescan rescan, const FakeProc& fake)
      : modules(
            rescan, [this](int pid, const std::string& path) { noticed.emplace_back(pid, path); },
            fake.proc(), [this] { return now; }) {}
};

TEST(MappedModules, KindsByFileName) {
  EXPECT_EQ(module_kind("/usr/lib/x86_64-linux-gnu/libcuda.so.1"), ModuleKind::Cuda);
  EXPECT_EQ(module_kind("/usr/lib/x86_64-linux-gnu/libcuda.so.570.86.15"), ModuleKind::Cuda);
  EXPECT_EQ(module_kind("/venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2"), ModuleKind::Nccl);
  EXPECT_EQ(module_kind(kCupti), ModuleKind::Cupti);
  EXPECT_EQ(module_kind("libhangtrace_cupti.so"), ModuleKind::Cupti);
  EXPECT_EQ(module_kind("/usr/lib/libnccl-net.so"), ModuleKind::Other);
  EXPECT_EQ(module_kind("/usr/local/cuda-13.0/lib/libcudart.so.13"), ModuleKind::Other);
  EXPECT_EQ(module_kind("/usr/local/cuda-13.0/lib/libcupti.so.13"), ModuleKind::Other);
  EXPECT_EQ(module_kind("/opt/libcuda.so.1/libc.so.6"), ModuleKind::Other);  // the file, not a directory
  EXPECT_EQ(module_kind(""), ModuleKind::Other);
}

TEST(MappedModules, MapsLibcuda) {
  FakeProc fake;
  fake.maps(100, procfs_fixture("maps_gpu_python"));
  fake.maps(200, procfs_fixture("maps_python_shm"));
  EXPECT_TRUE(maps_libcuda(100, fake.proc()));
  EXPECT_FALSE(maps_libcuda(200, fake.proc()));
  EXPECT_FALSE(maps_libcuda(300, fake.proc()));  // no such process
}

TEST(MappedModules, WindowNoticesEveryModuleOnceAndKeepsCodeMappings) {
  FakeProc fake;
  fake.maps(100, procfs_fixture("maps_gpu_python"));
  fake.thread(100, 100);
  fake.thread(100, 101);
  Discovery d(ModuleRescan::Window, fake);
  d.modules.watch(100);
  EXPECT_EQ(d.modules.maps_reads(), 1u);
  // In the order the process maps them.
  EXPECT_EQ(d.noticed, (std::vector<std::pair<int, std::string>>{{100, kCupti}, {100, kNccl}, {100, kCuda}}));
  EXPECT_EQ(d.modules.cuda_pids(), std::set<int>{100});
  EXPECT_TRUE(d.modules.any_maps_cuda());
  const std::vector<Mapping>* code = d.modules.code_maps(100);
  ASSERT_NE(code, nullptr);
  EXPECT_EQ(code->size(), kGpuPythonExecutableMappings);
  for (const Mapping& m : *code) EXPECT_TRUE(procfs::is_executable(m)) << m.path;
  EXPECT_EQ(d.modules.tgid_of(101), 100);
  EXPECT_EQ(d.modules.tgid_of(555), 555);  // unknown: itself
  EXPECT_EQ(d.modules.code_maps(555), nullptr);

  d.modules.watch(100);  // watched already
  EXPECT_EQ(d.modules.maps_reads(), 1u);
  // The first pass is due at once, the next 500 ms after it.
  d.now = 1000 * kMs;
  d.modules.refresh_due();
  EXPECT_EQ(d.modules.maps_reads(), 2u);
  d.now += 499 * kMs;
  d.modules.refresh_due();
  EXPECT_EQ(d.modules.maps_reads(), 2u);
  d.now += 1 * kMs;
  d.modules.refresh_due();
  EXPECT_EQ(d.modules.maps_reads(), 3u);
  EXPECT_EQ(d.noticed.size(), 3u) << "a re-read notices nothing again";

  // An exec is read at once; a process gone (empty maps) keeps what was known.
  fake.maps(100, "");
  d.modules.exec(100);
  EXPECT_EQ(d.modules.maps_reads(), 4u);
  ASSERT_NE(d.modules.code_maps(100), nullptr);
  EXPECT_EQ(d.modules.code_maps(100)->size(), kGpuPythonExecutableMappings);

  d.modules.forget(100);
  EXPECT_EQ(d.modules.code_maps(100), nullptr);
  EXPECT_FALSE(d.modules.any_maps_cuda());
  EXPECT_EQ(d.modules.cuda_pids(), std::set<int>{100}) << "seen once: still a CUDA process of the window";
}

TEST(MappedModules, WindowFindsALibraryLoadedLater) {
  FakeProc fake;
  fake.maps(100, procfs_fixture("maps_python_shm"));
  fake.maps(200, procfs_fixture("maps_python_shm"));
  Discovery d(ModuleRescan::Window, fake);
  d.modules.watch(100);
  d.modules.watch(200);
  EXPECT_TRUE(d.noticed.empty());
  EXPECT_TRUE(d.modules.cuda_pids().empty());
  fake.maps(200, procfs_fixture("maps_gpu_python"));  // dlopen()ed since
  d.modules.refresh_all();
  EXPECT_EQ(d.modules.maps_reads(), 4u);
  EXPECT_EQ(d.noticed.size(), 3u);
  EXPECT_EQ(d.modules.cuda_pids(), std::set<int>{200});
}

TEST(MappedModules, UntilCudaRereadsAtDoublingIntervalsUntilLibcuda) {
  FakeProc fake;
  fake.maps(100, procfs_fixture("maps_python_shm"));
  Discovery d(ModuleRescan::UntilCuda, fake);
  d.now = 10'000 * kMs;
  d.modules.watch(100);
  EXPECT_EQ(d.modules.maps_reads(), 1u);
  // Then 0.5 s, 1 s, 2 s, 4 s ... after each read.
  std::vector<uint64_t> reads_at;
  for (uint64_t t = 0; t <= 20'000; t += 50) {
    d.now = (10'000 + t) * kMs;
    uint64_t before = d.modules.maps_reads();
    d.modules.refresh_due();
    if (d.modules.maps_reads() != before) reads_at.push_back(t);
  }
  EXPECT_EQ(reads_at, (std::vector<uint64_t>{500, 1500, 3500, 7500, 15500}));
  EXPECT_TRUE(d.noticed.empty());
  EXPECT_EQ(d.modules.code_maps(100), nullptr) << "the daemon keeps no mappings";

  fake.maps(100, procfs_fixture("maps_gpu_python"));
  d.now = (10'000 + 15'500 + 16'000) * kMs;
  d.modules.refresh_due();
  // libcuda and libnccl; not hangtrace's CUPTI library (no GPU activity in the steady state).
  EXPECT_EQ(d.noticed, (std::vector<std::pair<int, std::string>>{{100, kNccl}, {100, kCuda}}));
  EXPECT_TRUE(d.modules.any_maps_cuda());
  const uint64_t reads = d.modules.maps_reads();
  d.now += 3'600'000 * kMs;
  d.modules.refresh_due();
  EXPECT_EQ(d.modules.maps_reads(), reads) << "libcuda mapped: never read again";

  d.modules.forget(100);
  EXPECT_FALSE(d.modules.any_maps_cuda());
  d.modules.watch(100);  // a reused pid: another process, read anew
  EXPECT_EQ(d.modules.maps_reads(), reads + 1);
  EXPECT_EQ(d.noticed.size(), 4u);
}

TEST(MappedModules, UntilCudaGapStopsAt30Seconds) {
  FakeProc fake;
  fake.maps(100, procfs_fixture("maps_python_shm"));
  Discovery d(ModuleRescan::UntilCuda, fake);
  d.modules.watch(100);
  uint64_t last_read = 0, gap = 0;
  for (uint64_t t = 0; t <= 600'000; t += 100) {
    d.now = t * kMs;
    uint64_t before = d.modules.maps_reads();
    d.modules.refresh_due();
    if (d.modules.maps_reads() != before) {
      gap = t - last_read;
      last_read = t;
    }
  }
  EXPECT_EQ(gap, 30'000u);
}

TEST(MappedModules, UntilCudaSkipsAReadWhileTheAddressSpaceKeepsItsSize) {
  // 1,000 idle processes: their maps re-read every 30 s cost ~5 % of a core.
  FakeProc fake;
  fake.maps(100, procfs_fixture("maps_python_shm"));
  fake.statm(100, 250'000);
  Discovery d(ModuleRescan::UntilCuda, fake);
  d.modules.watch(100);
  EXPECT_EQ(d.modules.maps_reads(), 1u);
  for (uint64_t t = 0; t <= 120'000; t += 100) {
    d.now = t * kMs;
    d.modules.refresh_due();
  }
  EXPECT_EQ(d.modules.maps_reads(), 1u) << "the same size: the same mappings";
  EXPECT_EQ(d.modules.maps_reads_skipped(), 8u) << "0.5, 1.5, 3.5, 7.5, 15.5, 31.5, 61.5, 91.5 s";

  // dlopen(libcuda): the address space grows, the next due read finds it.
  fake.maps(100, procfs_fixture("maps_gpu_python"));
  fake.statm(100, 262'144);
  d.now = 121'500 * kMs;
  d.modules.refresh_due();
  EXPECT_EQ(d.modules.maps_reads(), 2u);
  EXPECT_TRUE(d.modules.any_maps_cuda());
  EXPECT_EQ(d.noticed, (std::vector<std::pair<int, std::string>>{{100, kNccl}, {100, kCuda}}));
}

TEST(MappedModules, UntilCudaReadsWhenTheSizeCannotBeRead) {
  FakeProc fake;  // no statm: every due read happens, as before
  fake.maps(100, procfs_fixture("maps_python_shm"));
  Discovery d(ModuleRescan::UntilCuda, fake);
  d.modules.watch(100);
  d.now = 500 * kMs;
  d.modules.refresh_due();
  d.now = 1'500 * kMs;
  d.modules.refresh_due();
  EXPECT_EQ(d.modules.maps_reads(), 3u);
  EXPECT_EQ(d.modules.maps_reads_skipped(), 0u);
}

TEST(MappedModules, ManualOnlyWhatIsHandedIn) {
  FakeProc fake;
  fake.maps(100, procfs_fixture("maps_gpu_python"));
  Discovery d(ModuleRescan::Manual, fake);
  d.modules.watch(100);
  d.modules.refresh_due();
  d.modules.refresh_all();
  EXPECT_EQ(d.modules.maps_reads(), 0u);
  d.modules.note_file(100, "/usr/bin/python3");  // not a module: dropped
  d.modules.note_file(100, kCupti);
  d.modules.note_file(100, kCupti);  // once per (pid, path)
  d.modules.note_file(100, kCuda);
  d.modules.note_file(101, kCuda);
  EXPECT_EQ(d.noticed, (std::vector<std::pair<int, std::string>>{{100, kCupti}, {100, kCuda}, {101, kCuda}}));
  EXPECT_EQ(d.modules.cuda_pids(), (std::set<int>{100, 101}));
  EXPECT_FALSE(d.modules.any_maps_cuda()) << "nothing watched";
}

}  // namespace
}  // namespace hangtrace

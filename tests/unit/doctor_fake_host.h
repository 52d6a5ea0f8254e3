// A fake /proc and /sys under a temp dir for hangtrace doctor's tests
// (doctor_*_test.cpp): processes with their stat, cmdline, environ, limits,
// maps and fds; an injected statvfs for /dev/shm.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "hangtrace/doctor.h"
#include "temp_dir.h"

namespace hangtrace::doctor::testing {

// A string literal with its embedded NULs (argv as /proc/PID/cmdline has it).
#define NULS(s) std::string(s, sizeof(s) - 1)

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;
// A /dev/shm no check complains about: 16 GiB, all free.
constexpr uint64_t kRoomyShm = 16 * kGiB;

// /proc/PID/limits with these open-files and locked-memory rows.
std::string limits_text(const std::string& nofile_soft, const std::string& nofile_hard,
                        const std::string& memlock = "8388608");
// "KEY=VALUE\0..." from entries.
std::string env_bytes(const std::vector<std::string>& entries);
// A /proc/PID/maps line of a shared mapping of `path`.
std::string segment_line(uint64_t start, uint64_t bytes, uint64_t inode, const std::string& path);

// A process; by default the target: pid 100, python3 with torch 1.13 mapped.
struct FakeProcess {
  int pid = 100, ppid = 1, threads = 1;
  uint32_t flags = 0x00400000;  // PF_RANDOMIZE, a user process
  std::string comm = "python3";
  std::string cmdline = NULS("/usr/bin/python3\0train.py\0");
  std::string exe = "/usr/bin/python3.11";
  std::string environ = env_bytes({"PATH=/usr/bin"});
  std::string limits = limits_text("65536", "65536");
  std::string maps =
      "55d0c0000000-55d0c0001000 r-xp 00000000 fe:00 100 /usr/bin/python3.11\n"
      "7f0000000000-7f0000001000 r-xp 00000000 fe:00 200 /usr/lib/x86_64-linux-gnu/libtorch_cpu.so.1.13.0\n";
  int open_fds = 4;                   // fds 0..N-1, pointing at /dev/null
  std::vector<std::string> fd_extra;  // more fd link targets
};

// A host: doctor's own limits (nofile 1024), status (every capability),
// kernel 6.1 and a BTF file; processes added with add().
class FakeHost {
 public:
  FakeHost();
  ~FakeHost();

  void write(const std::string& path, const std::string& text);
  void add(const FakeProcess& p);
  // The target (FakeProcess's defaults) with this environment.
  void add_target_with_environ(const std::vector<std::string>& environ);

  // doctor's inputs for `pid` (0: no target), /dev/shm measured as shm_size
  // with shm_free free; hooks not probed ("not root").
  DoctorInputs inputs(int pid, uint64_t shm_size = kRoomyShm, uint64_t shm_free = kRoomyShm) const;
  // run_doctor on those inputs; a failure is a test failure.
  DoctorReport run(int pid, uint64_t shm_size = kRoomyShm, uint64_t shm_free = kRoomyShm) const;

  const std::string& root() const { return root_; }
  const std::string& proc() const { return proc_; }
  const std::string& sys() const { return sys_; }
  mutable std::string measured_path_;  // what the statvfs was last asked for

 private:
  ::hangtrace::testing::TempDir dir_{"hangtrace-doctor-test"};
  std::string root_, proc_, sys_;
};

// A DataLoader job: main pid 100 with `workers` forked children (101, ...),
// the main process mapping `tensors` segments of `tensor_bytes` each.
void add_loader_job(FakeHost& host, int workers, int tensors, uint64_t tensor_bytes, int main_threads = 3);

// The check `id` of the report (a test failure when there is none).
Check check_of(const DoctorReport& r, const std::string& id);
// run_doctor's report; a failure is a test failure.
DoctorReport run_ok(const DoctorInputs& in);

}  // namespace hangtrace::doctor::testing

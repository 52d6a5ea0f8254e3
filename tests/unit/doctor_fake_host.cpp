// The fake host of doctor's tests (doctor_fake_host.h).
#include "doctor_fake_host.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include <fmt/format.h>

namespace hangtrace::doctor::testing {

namespace fs = std::filesystem;

std::string limits_text(const std::string& nofile_soft, const std::string& nofile_hard,
                        const std::string& memlock) {
  return fmt::format(
      "Limit                     Soft Limit           Hard Limit           Units     \n"
      "Max cpu time              unlimited            unlimited            seconds   \n"
      "Max open files            {:<20} {:<20} files     \n"
      "Max locked memory         {:<20} {:<20} bytes     \n"
      "Max address space         unlimited            unlimited            bytes     \n",
      nofile_soft, nofile_hard, memlock, memlock);
}

std::string env_bytes(const std::vector<std::string>& entries) {
  std::string s;
  for (const auto& e : entries) s += e + '\0';
  return s;
}

std::string segment_line(uint64_t start, uint64_t bytes, uint64_t inode, const std::string& path) {
  return fmt::format("{:x}-{:x} rw-s 00000000 00:27 {:<10} {}\n", start, start + bytes, inode, path);
}

FakeHost::FakeHost() {
  root_ = dir_.path.string();
  proc_ = root_ + "/proc";
  sys_ = root_ + "/sys";
  write(proc_ + "/self/limits", limits_text("1024", "524288", "8388608"));
  write(proc_ + "/self/status", "Name:\thangtrace\nUid:\t0\t0\t0\t0\nCapEff:\t000001ffffffffff\n");
  write(proc_ + "/sys/kernel/osrelease", "6.1.0-18-amd64\n");
  write(sys_ + "/kernel/btf/vmlinux", std::string(4096, 'b'));
}

FakeHost::~FakeHost() = default;

void FakeHost::write(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

void FakeHost::add(const FakeProcess& p) {
  std::string dir = fmt::format("{}/{}", proc_, p.pid);
  write(
      dir + "/stat",
      fmt::format("{} ({}) S {} {} {} 0 -1 {} 3268 6515 7 0 6 3 2 6 20 0 {} 0 44377 21303296 3779 "
                  "18446744073709551615 94311138103296 94311138103637 140737146677488 0 0 0 0 16781312 2 0 0 "
                  "0 17 1 0 0 0 0 0 94311138114992 94311138115608 94311976226816 140737146685573 "
                  "140737146685648 140737146685648 140737146687439 0\n",
                  p.pid, p.comm, p.ppid, p.pid, p.ppid, p.flags, p.threads));
  write(dir + "/cmdline", p.cmdline);
  write(dir + "/environ", p.environ);
  write(dir + "/limits", p.limits);
  write(dir + "/maps", p.maps);
  fs::create_directories(dir + "/fd");
  fs::create_symlink(p.exe, dir + "/exe");
  int fd = 0;
  for (; fd < p.open_fds; ++fd) fs::create_symlink("/dev/null", fmt::format("{}/fd/{}", dir, fd));
  for (const auto& target : p.fd_extra) fs::create_symlink(target, fmt::format("{}/fd/{}", dir, fd++));
}

void FakeHost::add_target_with_environ(const std::vector<std::string>& environ) {
  FakeProcess p;
  p.environ = env_bytes(environ);
  add(p);
}

DoctorInputs FakeHost::inputs(int pid, uint64_t shm_size, uint64_t shm_free) const {
  DoctorInputs in;
  in.pid = pid;
  in.proc_root = proc_;
  in.sys_root = sys_;
  in.default_torch_version_py = root_ + "/no-torch/version.py";
  in.online_cpus = 8;
  in.hangtrace_version = "0.1.0";
  in.libbpf_version = "1.1";
  in.hooks.not_attempted_why = "not root";
  in.statvfs = [shm_size, shm_free, this](const std::string& path) -> Result<FsUsage> {
    measured_path_ = path;
    return FsUsage{shm_size, shm_free};
  };
  return in;
}

DoctorReport FakeHost::run(int pid, uint64_t shm_size, uint64_t shm_free) const {
  return run_ok(inputs(pid, shm_size, shm_free));
}

void add_loader_job(FakeHost& host, int workers, int tensors, uint64_t tensor_bytes, int main_threads) {
  FakeProcess main;
  main.threads = main_threads;
  for (int i = 0; i < tensors; ++i)
    main.maps += segment_line(0x7f1000000000 + i * 0x10000000ull, tensor_bytes, 500 + i,
                              fmt::format("/dev/shm/torch_101_{}_{} (deleted)", 1000 + i, i));
  host.add(main);
  for (int w = 0; w < workers; ++w) {
    FakeProcess worker = main;
    worker.pid = 101 + w;
    worker.ppid = 100;
    worker.threads = 1;
    worker.maps = FakeProcess().maps;
    host.add(worker);
  }
}

Check check_of(const DoctorReport& r, const std::string& id) {
  const Check* c = r.find(id);
  EXPECT_NE(c, nullptr) << "no check " << id;
  return c ? *c : Check{};
}

DoctorReport run_ok(const DoctorInputs& in) {
  auto r = run_doctor(in);
  EXPECT_TRUE(r.ok()) << r.error();
  return r.ok() ? *r : DoctorReport{};
}

}  // namespace hangtrace::doctor::testing

// A fixture /proc built file by file: each process's stat, status, cmdline,
// environ, cgroup, exe link and fds, for the logic that reads /proc through
// procfs::ProcFs (daemon job selection, jobs.h).
#pragma once

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "temp_dir.h"

namespace hangtrace::testing {

struct FakeProc {
  TempDir dir{"ht-fake-proc"};
  const std::filesystem::path& root = dir.path;
  // A process: stat (comm, ppid, flags, start time), status (Name, Tgid,
  // PPid, NSpid), cmdline (NUL-separated), cgroup, fds.
  void add(int pid, int ppid, const std::string& comm, const std::vector<std::string>& argv,
           const std::string& cgroup = "0::/user.slice\n", const std::vector<std::string>& fds = {},
           uint32_t flags = 0x400000, uint64_t start = 1000) {
    namespace fs = std::filesystem;
    fs::path dir = root / std::to_string(pid);
    fs::create_directories(dir / "fd");
    std::ofstream(dir / "stat") << pid << " (" << comm << ") S " << ppid << " " << pid << " " << pid
                                << " 0 -1 " << flags << " 0 0 0 0 1 2 0 0 20 0 1 0 " << start
                                << " 1000 100 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n";
    std::ofstream(dir / "comm") << comm << "\n";
    status(pid, ppid, comm, {pid});
    std::string cmd;
    for (const auto& a : argv) cmd += a + '\0';
    std::ofstream(dir / "cmdline", std::ios::binary) << cmd;
    std::ofstream(dir / "environ", std::ios::binary) << "";
    std::ofstream(dir / "cgroup") << cgroup;
    if (!argv.empty()) fs::create_symlink(argv[0], dir / "exe");
    int fd = 3;
    for (const auto& target : fds) fs::create_symlink(target, dir / "fd" / std::to_string(fd++));
  }
  void status(int pid, int ppid, const std::string& comm, const std::vector<int>& ns_pids) {
    std::ofstream out(root / std::to_string(pid) / "status");
    out << "Name:\t" << comm << "\nState:\tS (sleeping)\nTgid:\t" << pid << "\nPid:\t" << pid << "\nPPid:\t"
        << ppid << "\nNSpid:";
    for (int n : ns_pids) out << "\t" << n;
    out << "\nThreads:\t1\n";
  }
  // KEY=VALUE entries, NUL-separated as the kernel writes them.
  void environ(int pid, const std::vector<std::string>& entries) {
    std::string env;
    for (const auto& e : entries) env += e + '\0';
    std::ofstream(root / std::to_string(pid) / "environ", std::ios::binary) << env;
  }
};

}  // namespace hangtrace::testing

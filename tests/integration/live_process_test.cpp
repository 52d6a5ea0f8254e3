// The live tracer's process concern against real processes (root + BTF):
// fork following, exit status, signals with their sender, OOM kills in a
// memory cgroup, and nothing left attached after a SIGKILLed tracer.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "hangtrace/abi.h"
#include "live_tracer.h"
#include "live_records.h"
#include "support.h"

namespace hangtrace::testing {
namespace {

using namespace std::chrono_literals;

void print_hooks(const LiveTracer& t) {
  for (const auto& h : t.hooks()) {
    std::cout << "hook " << h.concern << "/" << h.program << " " << h.attach << " "
              << (h.active ? "active" : "inactive") << (h.reason.empty() ? "" : " -- " + h.reason) << "\n";
  }
}

void print_latency(const Collected& c) {
  if (c.latency_ns.empty()) return;
  uint64_t max = 0, sum = 0;
  for (uint64_t l : c.latency_ns) {
    sum += l;
    max = std::max(max, l);
  }
  std::cout << c.records.size() << " records; delivery latency mean " << sum / c.latency_ns.size() / 1000
            << " us, max " << max / 1000 << " us\n";
}

TEST(LiveProcess, FollowsForksAndReportsExitsAndSignalSenders) {
  HANGTRACE_REQUIRE_BPF();
  Workload w({repro_path("repro_forker")});
  auto ready = parse_ready_pids(w.wait_for_line("READY"));
  ASSERT_EQ(ready.size(), 1u);
  int pid = ready[0];

  LiveOptions opt;
  opt.tgids = {pid};
  uint64_t before = monotonic_now_ns();
  auto started = LiveTracer::start(opt);
  ASSERT_TRUE(started.ok()) << started.error();
  std::cout << "LiveTracer::start (every concern) took " << (monotonic_now_ns() - before) / 1'000'000
            << " ms\n";
  LiveTracer& t = **started;
  print_hooks(t);

  ASSERT_EQ(kill(pid, SIGUSR1), 0);
  std::string tree = w.wait_for_line("TREE", 20s);
  ASSERT_FALSE(tree.empty()) << "repro_forker never printed TREE";
  auto ids = parse_ready_pids(tree);
  ASSERT_EQ(ids.size(), 3u);
  int c = ids[0], g = ids[1], s = ids[2];
  ASSERT_FALSE(w.wait_for_line("DONE", 20s).empty());

  Collected got;
  // The whole-process exit of `tgid`, if seen.
  auto exit_of = [&](int tgid) -> std::optional<ht_proc_event> {
    for (const auto& e : got.of_type<ht_proc_event>(HT_EV_PROC_EXIT)) {
      if (static_cast<int>(e.hdr.tgid) == tgid && (e.flags & HT_PROC_WHOLE_PROCESS)) return e;
    }
    return std::nullopt;
  };
  // C exits last of the three; its exit event is the end of the story.
  bool complete = poll_until(t, got, [&] { return exit_of(c).has_value(); });
  ASSERT_TRUE(complete) << "no exit event for " << c << "; got:\n" << got.describe();
  print_latency(got);

  auto forks = got.of_type<ht_proc_event>(HT_EV_PROC_FORK);
  auto has_fork = [&](int parent, int child) {
    for (const auto& f : forks) {
      if (static_cast<int>(f.parent_tgid) == parent && static_cast<int>(f.child_tgid) == child &&
          static_cast<int>(f.hdr.tgid) == parent)
        return true;
    }
    return false;
  };
  EXPECT_TRUE(has_fork(pid, c)) << got.describe();
  // C was not in the traced set at start: its own forks prove it was followed.
  EXPECT_TRUE(has_fork(c, g)) << got.describe();
  EXPECT_TRUE(has_fork(c, s)) << got.describe();
  EXPECT_GE(t.counter(HT_CNT_TRACED_ADDED), 3u);

  auto ce = exit_of(c);
  ASSERT_TRUE(ce.has_value());
  EXPECT_EQ(ce->exit_code, 7 << 8);
  EXPECT_EQ(static_cast<int>(ce->parent_tgid), pid);
  auto ge = exit_of(g);
  ASSERT_TRUE(ge.has_value()) << got.describe();
  EXPECT_EQ(ge->exit_code & 0x7f, SIGBUS);

  bool saw_sigbus = false, saw_usr1 = false;
  for (const auto& sig : got.of_type<ht_signal_event>(HT_EV_SIGNAL)) {
    EXPECT_NE(sig.sig, static_cast<uint32_t>(SIGCHLD)) << "SIGCHLD is noise and must be filtered in kernel";
    if (sig.sig == SIGBUS && static_cast<int>(sig.hdr.tgid) == g) {
      saw_sigbus = true;
      EXPECT_EQ(static_cast<int>(sig.hdr.tid), g);
      EXPECT_EQ(static_cast<int>(sig.sender_tgid), s);
      EXPECT_EQ(static_cast<int>(sig.sender_tid), s);
      EXPECT_EQ(sig.code, 0);  // SI_USER: kill(2)
      EXPECT_EQ(sig.result, 0);
      EXPECT_STREQ(std::string(sig.sender_comm, strnlen(sig.sender_comm, HT_COMM_LEN)).c_str(),
                   "repro_forker");
    }
    if (sig.sig == SIGUSR1 && static_cast<int>(sig.hdr.tgid) == pid) {
      saw_usr1 = true;
      EXPECT_EQ(static_cast<int>(sig.sender_tgid), static_cast<int>(getpid()));
    }
  }
  EXPECT_TRUE(saw_sigbus) << got.describe();
  EXPECT_TRUE(saw_usr1) << got.describe();
  EXPECT_EQ(t.counter(HT_CNT_DROPPED), 0u);
  EXPECT_GE(t.counter(HT_CNT_EVENTS), got.records.size());
}

// A memory cgroup (v1) made for one test and removed on every path.
class MemoryCgroup {
 public:
  explicit MemoryCgroup(uint64_t limit) {
    path_ = "/sys/fs/cgroup/memory/hangtrace-test-" + std::to_string(getpid());
    if (mkdir(path_.c_str(), 0755) != 0) {
      error_ = "mkdir " + path_ + ": " + std::strerror(errno);
      path_.clear();
      return;
    }
    if (!write("memory.limit_in_bytes", std::to_string(limit))) return;
    // With swap on, the limit alone would swap the hog out rather than kill it.
    if (access((path_ + "/memory.memsw.limit_in_bytes").c_str(), F_OK) == 0)
      write("memory.memsw.limit_in_bytes", std::to_string(limit));
  }
  ~MemoryCgroup() {
    if (path_.empty()) return;
    // The last member was reaped already; the kernel may still be tearing the
    // css down, so a few EBUSY are expected.
    for (int i = 0; i < 500 && rmdir(path_.c_str()) != 0 && errno == EBUSY; ++i) usleep(10'000);
  }
  bool write(const std::string& file, const std::string& value) {
    std::ofstream f(path_ + "/" + file);
    f << value;
    f.flush();
    if (!f) error_ = "writing " + file + " failed";
    return static_cast<bool>(f);
  }
  const std::string& path() const { return path_; }
  const std::string& error() const { return error_; }

 private:
  std::string path_;
  std::string error_;
};

TEST(LiveProcess, OomVictimInMemoryCgroupCarriesCgroupAndLimit) {
  HANGTRACE_REQUIRE_BPF();
  if (access("/sys/fs/cgroup/memory/cgroup.procs", W_OK) != 0)
    GTEST_SKIP() << "no cgroup v1 memory controller";
  const uint64_t limit = 32u << 20;
  MemoryCgroup cg(limit);  // declared first: destroyed after the workload is reaped
  ASSERT_TRUE(cg.error().empty()) << cg.error();
  struct stat st {};
  ASSERT_EQ(stat(cg.path().c_str(), &st), 0);

  // Joins the cgroup itself, then becomes the hog (same pid).
  Workload w(
      {"/bin/sh", "-c", "echo $$ > " + cg.path() + "/cgroup.procs && exec " + repro_path("repro_oom_hog")});
  auto ready = parse_ready_pids(w.wait_for_line("READY"));
  ASSERT_EQ(ready.size(), 1u);
  int pid = ready[0];
  ASSERT_EQ(pid, w.pid());

  LiveOptions opt;
  opt.tgids = {pid};
  auto started = LiveTracer::start(opt);
  ASSERT_TRUE(started.ok()) << started.error();
  LiveTracer& t = **started;

  uint64_t t0 = monotonic_now_ns();
  ASSERT_EQ(kill(pid, SIGUSR1), 0);
  Collected got;
  auto victim = [&]() -> std::vector<ht_oom_event> { return got.of_type<ht_oom_event>(HT_EV_OOM_VICTIM); };
  auto exited = [&] {
    for (const auto& e : got.of_type<ht_proc_event>(HT_EV_PROC_EXIT))
      if (static_cast<int>(e.hdr.tgid) == pid && (e.flags & HT_PROC_WHOLE_PROCESS)) return true;
    return false;
  };
  bool complete = poll_until(
      t, got, [&] { return !victim().empty() && exited(); }, 60s);
  ASSERT_TRUE(complete) << "no OOM victim/exit event for " << pid << "; got:\n" << got.describe();
  std::cout << "OOM kill seen " << (monotonic_now_ns() - t0) / 1'000'000 << " ms after the hog started\n";
  print_latency(got);

  auto v = victim();
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(static_cast<int>(v[0].hdr.tgid), pid);
  EXPECT_EQ(static_cast<int>(v[0].hdr.tid), pid);
  EXPECT_STREQ(std::string(v[0].hdr.comm, strnlen(v[0].hdr.comm, HT_COMM_LEN)).c_str(), "repro_oom_hog");
  EXPECT_EQ(v[0].memcg_id, static_cast<uint64_t>(st.st_ino));
  EXPECT_EQ(v[0].memcg_limit_pages * static_cast<uint64_t>(sysconf(_SC_PAGESIZE)), limit);
  // The victim's RSS is about the limit: it was the only charge in the group.
  EXPECT_GT(v[0].anon_rss_kb, 16u << 10) << "anon_rss_kb " << v[0].anon_rss_kb;
  EXPECT_LE(v[0].anon_rss_kb, limit >> 10);
  EXPECT_GT(v[0].total_vm_kb, v[0].anon_rss_kb);
  std::cout << "victim total_vm " << v[0].total_vm_kb << " kB, anon_rss " << v[0].anon_rss_kb << " kB, memcg "
            << v[0].memcg_id << ", limit " << v[0].memcg_limit_pages << " pages\n";

  for (const auto& e : got.of_type<ht_proc_event>(HT_EV_PROC_EXIT)) {
    if (static_cast<int>(e.hdr.tgid) == pid && (e.flags & HT_PROC_WHOLE_PROCESS)) {
      EXPECT_EQ(e.exit_code & 0x7f, SIGKILL);
    }
  }
  // The OOM killer's SIGKILL, generated in the kernel (SI_KERNEL).
  bool saw_kill = false;
  for (const auto& s : got.of_type<ht_signal_event>(HT_EV_SIGNAL)) {
    if (s.sig == SIGKILL && static_cast<int>(s.hdr.tgid) == pid) {
      saw_kill = true;
      EXPECT_EQ(s.code, 0x80);
    }
  }
  EXPECT_TRUE(saw_kill) << got.describe();
}

// "prog_id:" / "link_id:" of every BPF fd a process holds.
std::set<uint32_t> bpf_ids_of(int pid, const char* key) {
  std::set<uint32_t> ids;
  std::string fd_dir = "/proc/" + std::to_string(pid) + "/fdinfo";
  DIR* dir = opendir(fd_dir.c_str());
  if (!dir) return ids;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream f(fd_dir + "/" + e->d_name);
    std::string line;
    bool link = false;
    std::vector<uint32_t> found;
    while (std::getline(f, line)) {
      if (line.rfind("link_type:", 0) == 0) link = true;
      if (line.rfind(key, 0) == 0)
        found.push_back(static_cast<uint32_t>(std::stoul(line.substr(strlen(key)))));
    }
    // A link's fdinfo names its program too; count programs from prog fds only.
    if (std::string(key) == "prog_id:" && link) continue;
    ids.insert(found.begin(), found.end());
  }
  closedir(dir);
  return ids;
}

// The ids bpftool lists right now ("prog" or "link"). bpftool walks the
// ids and then opens each object; one that a test beside this one (ctest -j)
// closes in between fails the walk, so a failed walk is taken again, and one
// that keeps failing is nullopt (never an empty list that passes a check).
std::optional<std::set<uint32_t>> bpftool_ids(const std::string& what) {
  for (int attempt = 1; attempt <= 20; ++attempt) {
    auto r = run_command({"bpftool", "-j", what, "show"});
    auto j = nlohmann::json::parse(r.out, nullptr, false);
    if (r.exit_code == 0 && j.is_array()) {
      std::set<uint32_t> ids;
      for (const auto& e : j)
        if (e.contains("id")) ids.insert(e["id"].get<uint32_t>());
      return ids;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50 * attempt));
  }
  return std::nullopt;
}

std::vector<uint32_t> still_listed(const std::set<uint32_t>& ours, const std::set<uint32_t>& listed) {
  std::vector<uint32_t> out;
  for (uint32_t id : ours)
    if (listed.count(id)) out.push_back(id);
  return out;
}

TEST(LiveProcess, NothingStaysAttachedAfterSigkill) {
  HANGTRACE_REQUIRE_BPF();
  if (run_command({"bpftool", "version"}).exit_code != 0) GTEST_SKIP() << "bpftool not available";
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(fds[0]);
    LiveOptions opt;
    opt.tgids = {static_cast<int>(getpid())};
    auto started = LiveTracer::start(opt);
    const char* msg = started.ok() ? "R" : "F";
    if (::write(fds[1], msg, 1) != 1) _exit(1);
    for (;;) pause();  // holds every fd until SIGKILL
  }
  close(fds[1]);
  pollfd p{fds[0], POLLIN, 0};
  char c = 0;
  bool ready = poll(&p, 1, 30'000) == 1 && read(fds[0], &c, 1) == 1 && c == 'R';
  close(fds[0]);
  std::set<uint32_t> progs, links;
  if (ready) {
    progs = bpf_ids_of(child, "prog_id:");
    links = bpf_ids_of(child, "link_id:");
  }
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  ASSERT_TRUE(ready) << "the tracer in the child did not start";
  // At least the process concern's five hooks.
  ASSERT_GE(progs.size(), 5u);
  ASSERT_GE(links.size(), 5u);

  // The kernel frees programs and links once their last fd is gone (after an
  // RCU grace period), so poll what bpftool sees, bounded.
  std::vector<uint32_t> left_progs, left_links;
  auto deadline = std::chrono::steady_clock::now() + 20s;
  do {
    auto listed_links = bpftool_ids("link");
    auto listed_progs = bpftool_ids("prog");
    ASSERT_TRUE(listed_links && listed_progs) << "bpftool link/prog show kept failing";
    left_links = still_listed(links, *listed_links);
    left_progs = still_listed(progs, *listed_progs);
    if (left_links.empty() && left_progs.empty()) break;
    usleep(20'000);
  } while (std::chrono::steady_clock::now() < deadline);
  EXPECT_TRUE(left_links.empty()) << left_links.size() << " links still attached";
  EXPECT_TRUE(left_progs.empty()) << left_progs.size() << " programs still loaded";
  std::cout << progs.size() << " programs and " << links.size() << " links gone after SIGKILL\n";
}

}  // namespace
}  // namespace hangtrace::testing

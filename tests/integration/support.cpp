#include "support.h"

#include <filesystem>
#include <regex>

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace hangtrace::testing {

std::string missing_privileges() {
  if (geteuid() != 0) return "needs root (CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE)";
  struct stat st {};
  if (stat("/sys/kernel/btf/vmlinux", &st) != 0) return "needs kernel BTF at /sys/kernel/btf/vmlinux";
  return "";
}

static std::vector<char*> to_argv(std::vector<std::string>& args) {
  std::vector<char*> out;
  for (auto& a : args) out.push_back(a.data());
  out.push_back(nullptr);
  return out;
}

Workload::Workload(std::vector<std::string> argv, bool gated_stdin) {
  int fds[2], in[2] = {-1, -1};
  if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
  if (gated_stdin && pipe2(in, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
  pid_ = fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    setpgid(0, 0);
    if (gated_stdin) dup2(in[0], STDIN_FILENO);
    dup2(fds[1], STDOUT_FILENO);
    auto args = to_argv(argv);
    execvp(args[0], args.data());
    _exit(127);
  }
  setpgid(pid_, pid_);
  close(fds[1]);
  stdout_fd_ = fds[0];
  if (gated_stdin) {
    close(in[0]);
    stdin_fd_ = in[1];
  }
}

Workload::~Workload() {
  kill_all();
  if (stdout_fd_ >= 0) close(stdout_fd_);
  if (stdin_fd_ >= 0) close(stdin_fd_);
}

void Workload::release() {
  if (stdin_fd_ < 0 || write(stdin_fd_, "go\n", 3) != 3)
    throw std::runtime_error("releasing the workload failed");
}

int Workload::wait_exit(std::chrono::milliseconds timeout) {
  // "\x01" never starts a line: this reads to EOF (or the timeout).
  wait_for_line("\x01", timeout);
  int status = 0;
  if (pid_ <= 0 || waitpid(pid_, &status, 0) != pid_) return -1;
  pid_ = -1;
  return status;
}

void Workload::kill_all() {
  if (pid_ <= 0) return;
  ::kill(-pid_, SIGKILL);
  ::kill(pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

std::string Workload::wait_for_line(const std::string& prefix, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    size_t nl;
    while ((nl = buffer_.find('\n')) != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      if (line.rfind(prefix, 0) == 0) return line;
    }
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return "";
    pollfd p{stdout_fd_, POLLIN, 0};
    int r = poll(&p, 1, static_cast<int>(left.count()));
    if (r <= 0) continue;
    char buf[4096];
    ssize_t n = read(stdout_fd_, buf, sizeof buf);
    if (n <= 0) return "";
    buffer_.append(buf, static_cast<size_t>(n));
  }
}

CommandResult run_command(const std::vector<std::string>& argv_in, std::chrono::seconds timeout) {
  CommandResult result;
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    std::vector<std::string> argv = argv_in;
    auto args = to_argv(argv);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  auto deadline = std::chrono::steady_clock::now() + timeout;
  bool out_open = true, err_open = true;
  while (out_open || err_open) {
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      kill(pid, SIGKILL);
      break;
    }
    pollfd p[2] = {{out_open ? out[0] : -1, POLLIN, 0}, {err_open ? err[0] : -1, POLLIN, 0}};
    if (poll(p, 2, static_cast<int>(left.count())) <= 0) continue;
    char buf[8192];
    for (int i = 0; i < 2; ++i) {
      if (!(p[i].revents & (POLLIN | POLLHUP))) continue;
      ssize_t n = read(i == 0 ? out[0] : err[0], buf, sizeof buf);
      if (n <= 0) {
        (i == 0 ? out_open : err_open) = false;
      } else {
        (i == 0 ? result.out : result.err).append(buf, static_cast<size_t>(n));
      }
    }
  }
  close(out[0]);
  close(err[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

HttpAnswer http_get(const std::string& url, const std::vector<std::string>& headers) {
  std::vector<std::string> argv = {"/usr/bin/python3", "-c",
                                   "import sys, urllib.request, urllib.error\n"
                                   "req = urllib.request.Request(sys.argv[1])\n"
                                   "for h in sys.argv[2:]:\n"
                                   "    k, v = h.split(': ', 1)\n"
                                   "    req.add_header(k, v)\n"
                                   "try:\n"
                                   "    r = urllib.request.urlopen(req, timeout=30)\n"
                                   "    code, body = r.status, r.read()\n"
                                   "except urllib.error.HTTPError as e:\n"
                                   "    code, body = e.code, e.read()\n"
                                   "sys.stdout.write('%d\\n' % code)\n"
                                   "sys.stdout.flush()\n"
                                   "sys.stdout.buffer.write(body)\n",
                                   url};
  argv.insert(argv.end(), headers.begin(), headers.end());
  CommandResult r = run_command(argv);
  HttpAnswer a;
  const size_t nl = r.out.find('\n');
  if (r.exit_code != 0 || nl == std::string::npos) return a;
  a.status = std::atoi(r.out.substr(0, nl).c_str());
  a.body = r.out.substr(nl + 1);
  return a;
}

std::string daemon_served_base(const std::string& ready_line) {
  std::smatch m;
  if (!std::regex_search(ready_line, m, std::regex("http://([0-9.:]+)/metrics"))) return "";
  return "http://" + m[1].str();
}

std::string daemon_bundle_path(const std::string& written_line) {
  const size_t at = written_line.find(": /");
  if (at == std::string::npos) return "";
  std::string path = written_line.substr(at + 2);
  return path.substr(0, path.find(" ("));
}

std::string repro_path(const std::string& name) { return std::string(HANGTRACE_REPRO_DIR) + "/" + name; }

std::string own_repro(const TempDir& dir, const std::string& name) {
  const std::string link = dir.file(name);
  std::error_code ec;
  std::filesystem::create_symlink(repro_path(name), link, ec);
  if (ec) throw std::runtime_error("failed to link " + link + ": " + ec.message());
  return link;
}
std::string hangtrace_path() { return HANGTRACE_BIN; }

std::vector<int> parse_ready_pids(const std::string& line) {
  std::istringstream in(line);
  std::string word;
  in >> word;  // "READY"
  std::vector<int> pids;
  int pid;
  while (in >> pid) pids.push_back(pid);
  return pids;
}

std::map<std::string, std::string> line_fields(const std::string& line) {
  std::map<std::string, std::string> out;
  std::istringstream in(line);
  std::string word;
  while (in >> word) {
    auto eq = word.find('=');
    if (eq != std::string::npos) out[word.substr(0, eq)] = word.substr(eq + 1);
  }
  return out;
}

int field_int(const std::map<std::string, std::string>& fields, const std::string& key) {
  auto it = fields.find(key);
  return it == fields.end() ? -1 : static_cast<int>(std::stoll(it->second, nullptr, 0));
}

static std::string read_small_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<ThreadState> thread_states(int pid) {
  std::vector<ThreadState> out;
  std::string task_dir = "/proc/" + std::to_string(pid) + "/task";
  DIR* dir = opendir(task_dir.c_str());
  if (!dir) return out;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    ThreadState t;
    t.tid = std::atoi(e->d_name);
    std::string base = task_dir + "/" + e->d_name;
    // stat: "tid (comm) S ..." -- comm may hold spaces and parens: use the last ')'.
    std::string stat = read_small_file(base + "/stat");
    size_t rp = stat.rfind(')');
    if (rp != std::string::npos && rp + 2 < stat.size()) t.state = stat[rp + 2];
    std::string sc = read_small_file(base + "/syscall");
    if (!sc.empty() && (sc[0] == '-' || (sc[0] >= '0' && sc[0] <= '9'))) t.syscall_nr = std::atol(sc.c_str());
    t.wchan = read_small_file(base + "/wchan");
    out.push_back(t);
  }
  closedir(dir);
  std::sort(out.begin(), out.end(), [](const ThreadState& a, const ThreadState& b) { return a.tid < b.tid; });
  return out;
}

std::string describe_threads(int pid) {
  std::ostringstream out;
  auto threads = thread_states(pid);
  if (threads.empty()) out << "pid " << pid << ": no threads (gone?)\n";
  for (const auto& t : threads)
    out << "pid " << pid << " tid " << t.tid << " state " << t.state << " syscall " << t.syscall_nr
        << " wchan " << t.wchan << "\n";
  return out.str();
}

static bool all_blocked(int pid, const std::vector<long>& syscalls) {
  auto threads = thread_states(pid);
  if (threads.empty()) return false;
  for (const auto& t : threads) {
    if (t.state != 'S' && t.state != 'D') return false;
    if (t.syscall_nr < 0) return false;
    if (!syscalls.empty() && std::find(syscalls.begin(), syscalls.end(), t.syscall_nr) == syscalls.end())
      return false;
  }
  return true;
}

std::string wait_until_blocked(int pid, std::chrono::milliseconds timeout, std::vector<long> syscalls) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  int in_a_row = 0;
  for (;;) {
    in_a_row = all_blocked(pid, syscalls) ? in_a_row + 1 : 0;
    if (in_a_row >= 2) return "";
    if (std::chrono::steady_clock::now() >= deadline) {
      std::string seen = describe_threads(pid);
      return seen.empty() ? "pid " + std::to_string(pid) + " not found" : seen;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

std::vector<nlohmann::json> HangtraceRun::findings(const std::string& kind) const {
  std::vector<nlohmann::json> out;
  if (!report.is_object() || !report.contains("findings") || !report["findings"].is_array()) return out;
  for (const auto& f : report["findings"])
    if (f.is_object() && f.value("kind", "") == kind) out.push_back(f);
  return out;
}

std::string HangtraceRun::dump() const {
  std::ostringstream out;
  out << "hangtrace exit code " << cmd.exit_code << "\n--- stderr ---\n" << cmd.err << "\n--- report ---\n";
  if (!report.is_null())
    out << report.dump(2);
  else
    out << "(not JSON: " << parse_error << ")\n" << cmd.out;
  return out.str();
}

HangtraceRun run_hangtrace(int pid, const std::vector<std::string>& extra, std::chrono::seconds timeout) {
  std::vector<std::string> argv = {hangtrace_path(), "--pid", std::to_string(pid), "--json", "-"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  HangtraceRun run;
  run.cmd = run_command(argv, timeout);
  try {
    run.report = nlohmann::json::parse(run.cmd.out);
  } catch (const std::exception& e) {
    run.parse_error = e.what();
  }
  return run;
}

std::vector<int> finding_pids(const nlohmann::json& finding) {
  std::vector<int> out;
  if (finding.contains("pids") && finding["pids"].is_array())
    for (const auto& p : finding["pids"])
      if (p.is_number_integer()) out.push_back(p.get<int>());
  return out;
}

const nlohmann::json* find_finding(const nlohmann::json& report, const std::string& kind) {
  if (!report.contains("findings")) return nullptr;
  for (const auto& f : report["findings"])
    if (f["kind"] == kind) return &f;
  return nullptr;
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace hangtrace::testing

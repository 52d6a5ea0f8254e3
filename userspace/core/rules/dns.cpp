// dns-wait: a thread of the job inside a name lookup that has not come back
// -- its native frames in getaddrinfo / gethostbyname / res_* / _nss_dns, its
// Python frames in socket.getaddrinfo, or its wait on a TCP/UDP socket to
// port 53 -- with the resolver the process is set up with (its resolv.conf,
// through its mount namespace) and, when the resolver is on this host, the
// process that should answer (or that none listens there).
#include <algorithm>
#include <array>

#include <fmt/format.h>

#include "hangtrace/procfs.h"
#include "hangtrace/text.h"
#include "rules.h"

namespace hangtrace::rules {

namespace {

constexpr uint16_t kDnsPort = 53;
// glibc's defaults when resolv.conf sets neither (resolv.h RES_TIMEOUT, RES_DFLRETRY).
constexpr int kGlibcTimeoutS = 5, kGlibcAttempts = 2;

// "getaddrinfo@@GLIBC_2.2.5" / "send_dg.constprop.0" -> "getaddrinfo" / "send_dg".
std::string_view bare_symbol(std::string_view name) {
  size_t end = name.find_first_of("@+(.");
  return end == std::string_view::npos ? name : name.substr(0, end);
}

bool is_resolver_symbol(std::string_view name) {
  static constexpr std::array<std::string_view, 26> kExact = {
      "getaddrinfo",
      "getaddrinfo_a",
      "gaih_inet",
      "gethostbyname",
      "gethostbyname2",
      "gethostbyname_r",
      "gethostbyname2_r",
      "gethostbyaddr",
      "gethostbyaddr_r",
      "getnameinfo",
      "res_query",
      "res_search",
      "res_send",
      "res_nquery",
      "res_nsearch",
      "res_nsend",
      "res_querydomain",
      "__res_context_send",
      "__res_context_query",
      "__res_context_search",
      "__libc_res_nquery",
      "__libc_res_nsend",
      "__res_nquery",
      "__res_nsend",
      "send_dg",
      "send_vc",
  };
  std::string_view bare = bare_symbol(name);
  if (bare.empty()) return false;
  if (std::find(kExact.begin(), kExact.end(), bare) != kExact.end()) return true;
  return bare.rfind("_nss_dns_", 0) == 0 || bare.rfind("_nss_resolve_", 0) == 0;
}

// socket.getaddrinfo and friends: Python functions of Lib/socket.py or the
// _socket module's (a "getaddrinfo" in the user's own module is not one).
bool is_resolver_python_frame(const UserFrame& fr) {
  std::string_view fn = fr.function;
  if (size_t dot = fn.rfind('.'); dot != std::string_view::npos) fn = fn.substr(dot + 1);
  static constexpr std::array<std::string_view, 6> kNames = {
      "getaddrinfo", "gethostbyname", "gethostbyname_ex", "gethostbyaddr", "getnameinfo", "getfqdn"};
  if (std::find(kNames.begin(), kNames.end(), fn) == kNames.end()) return false;
  std::string_view file = fr.file;
  return file.empty() || file == "socket.py" ||
         (file.size() > 10 && file.substr(file.size() - 10) == "/socket.py");
}

// The frame that puts `t` inside a lookup, in words -- the outermost, the
// call the program made (getaddrinfo rather than glibc's send_dg under it);
// "" when none does.
std::string resolver_frame(const ThreadInfo& t) {
  for (auto fr = t.native_stack.rbegin(); fr != t.native_stack.rend(); ++fr)
    if (is_resolver_symbol(fr->function))
      return fmt::format("{} (native{})", bare_symbol(fr->function),
                         fr->file.empty() ? "" : ", " + basename_of(fr->file));
  for (auto fr = t.python_stack.rbegin(); fr != t.python_stack.rend(); ++fr)
    if (is_resolver_python_frame(*fr))
      return fmt::format("{} (Python{})", fr->function,
                         fr->file.empty() ? "" : fmt::format(", {}:{}", fr->file, fr->line));
  return "";
}

// The socket to port 53 `w` waits on, if any.
const WaitObject* dns_socket(const RuleContext& ctx, const ThreadWait& w) {
  for (const auto& id : w.objects) {
    const WaitObject& o = ctx.object(id);
    if (o.kind != ObjectKind::TcpSocket && o.kind != ObjectKind::UdpSocket) continue;
    auto remote = procfs::parse_endpoint(o.remote);
    if (remote && remote->port == kDnsPort) return &o;
  }
  return nullptr;
}

bool is_waiting(const ThreadWait& w) {
  return w.activity == Activity::Blocked || w.activity == Activity::TimedWait;
}

std::string endpoint_of(const std::string& ip) {
  return ip.find(':') == std::string::npos ? fmt::format("{}:{}", ip, kDnsPort)
                                           : fmt::format("[{}]:{}", ip, kDnsPort);
}

Finding dns_wait(const RuleContext& ctx, const ThreadWait& w, const ProcessInfo* p, const WaitObject* sock,
                 const std::string& frame) {
  const int tid = w.tid;
  Finding f(FindingKind::DnsWait);
  f.confidence = Confidence::Certain;
  add_unique(f.tids, tid);
  add_unique(f.pids, w.pid);
  const ResolverConfig* config = p && p->resolver ? &*p->resolver : nullptr;

  // Which resolver: the one the socket talks to, else the first nameserver.
  std::string resolver;
  if (sock)
    resolver = sock->remote;
  else if (config && !config->nameservers.empty())
    resolver = endpoint_of(config->nameservers.front());
  std::optional<procfs::Endpoint> resolver_ep = procfs::parse_endpoint(resolver);
  const bool on_this_host =
      sock ? sock->remote_on_this_host
           : resolver_ep && procfs::is_this_host_address(resolver_ep->ip, ctx.snap.local_addresses);

  std::vector<int> resolver_pids;
  if (sock)
    for (int pid : sock->holder_pids) add_unique(resolver_pids, pid);
  std::string answer;
  if (!resolver_pids.empty()) {
    answer = fmt::format("; the resolver on this host is {}", peer_labels(ctx, resolver_pids));
  } else if (sock && on_this_host) {
    answer = fmt::format("; no process on this host listens on {}", resolver);
  } else if (sock) {
    answer = "; the resolver is not on this host";
  }

  // Severity: past --stall-after (the caller skipped shorter ones); a wait of
  // unknown length (no BPF) only warns.
  f.severity = w.blocked_s ? Severity::Critical : Severity::Warning;
  f.summary = fmt::format("{} has been waiting {} in a DNS lookup{}{}", ctx.thread_label(tid),
                          for_duration(w.blocked_s), resolver.empty() ? "" : " via " + resolver, answer);

  ctx.add_thread_evidence(f, tid);
  if (!frame.empty()) f.evidence.push_back(fmt::format("inside {}", frame));
  if (sock)
    f.evidence.push_back(fmt::format("waits on {} {} -> {}",
                                     sock->kind == ObjectKind::UdpSocket ? "UDP socket" : "TCP socket",
                                     sock->local, sock->remote));
  for (int pid : resolver_pids) ctx.add_thread_evidence(f, pid);
  if (sock)
    for (const auto& n : sock->notes) f.evidence.push_back(n);
  if (config && config->error.empty()) {
    std::vector<std::string> servers;
    for (const auto& ns : config->nameservers) servers.push_back("nameserver " + ns);
    std::vector<std::string> options;
    if (config->timeout_s) options.push_back(fmt::format("timeout:{}", *config->timeout_s));
    if (config->attempts) options.push_back(fmt::format("attempts:{}", *config->attempts));
    f.evidence.push_back(
        fmt::format("/etc/resolv.conf as pid {} sees it: {}{}", w.pid,
                    servers.empty() ? "no nameserver line (glibc then asks 127.0.0.1)"
                                    : fmt::format("{}", fmt::join(servers, ", ")),
                    options.empty() ? "" : fmt::format("; options {}", fmt::join(options, " "))));
    const int timeout = std::clamp(config->timeout_s.value_or(kGlibcTimeoutS), 1, 30);
    const int attempts = std::clamp(config->attempts.value_or(kGlibcAttempts), 1, 5);
    const size_t servers_n = std::max<size_t>(1, std::min<size_t>(3, config->nameservers.size()));
    f.evidence.push_back(
        fmt::format("each query may wait {} s x {} attempt{} x {} nameserver{} = {} s before glibc gives up",
                    timeout, attempts, attempts == 1 ? "" : "s", servers_n, servers_n == 1 ? "" : "s",
                    timeout * attempts * servers_n));
  } else if (config) {
    f.evidence.push_back(config->error);
  }
  if (ctx.reachable_from_main(tid)) ctx.add_main_chain(f, tid, sock ? sock->id : "");

  std::string who = resolver.empty() ? "the nameserver in /etc/resolv.conf" : resolver;
  f.advice = {
      fmt::format("Check the resolver {}: is it running and answering (getent hosts NAME, or dig @{} NAME, "
                  "from inside the job's container), and does /etc/resolv.conf as the job sees it name the "
                  "right one?",
                  who, resolver_ep ? resolver_ep->ip : "SERVER"),
      "Bound each lookup in resolv.conf ('options timeout:2 attempts:2'; glibc waits 5 s x 2 attempts per "
      "nameserver by default, up to 30 s x 5): a dead resolver then fails the step instead of hanging it.",
      "Resolve the name once in the main process before starting DataLoader workers or ranks, and hand "
      "them the address: one lookup instead of one per worker, and a failure at start-up.",
      "Use an IP address (or an /etc/hosts entry) for a fixed endpoint such as the dataset server or the "
      "rendezvous host.",
  };

  f.details = {
      {"name", nullptr},  // the name looked up: not in what hangtrace reads
      {"resolver", resolver.empty() ? nlohmann::json(nullptr) : nlohmann::json(resolver)},
      {"resolver_on_this_host", on_this_host},
      {"resolver_pids", resolver_pids},
      {"nameservers", config ? config->nameservers : std::vector<std::string>{}},
      {"resolv_timeout_s",
       config && config->timeout_s ? nlohmann::json(*config->timeout_s) : nlohmann::json(nullptr)},
      {"resolv_attempts",
       config && config->attempts ? nlohmann::json(*config->attempts) : nlohmann::json(nullptr)},
      {"frame", frame.empty() ? nlohmann::json(nullptr) : nlohmann::json(frame)},
      {"local", sock ? nlohmann::json(sock->local) : nlohmann::json(nullptr)},
      {"blocked_s", w.blocked_s ? nlohmann::json(*w.blocked_s) : nlohmann::json(nullptr)},
  };
  return f;
}

}  // namespace

bool is_dns_lookup(const RuleContext& ctx, const ThreadWait& w) {
  if (dns_socket(ctx, w)) return true;
  const ProcessInfo* p = ctx.snap.process(w.pid);
  const ThreadInfo* t = p ? p->thread(w.tid) : nullptr;
  return t && !resolver_frame(*t).empty();
}

std::vector<Finding> dns_wait_findings(const RuleContext& ctx) {
  std::vector<Finding> out;
  for (const auto& [tid, w] : ctx.graph.threads) {
    if (!is_waiting(w) || !ctx.in_tree(tid)) continue;
    if (w.blocked_s && *w.blocked_s < ctx.opt.stall_after_s) continue;
    const ProcessInfo* p = ctx.snap.process(w.pid);
    const ThreadInfo* t = p ? p->thread(tid) : nullptr;
    const WaitObject* sock = dns_socket(ctx, w);
    std::string frame = t ? resolver_frame(*t) : "";
    if (!sock && frame.empty()) continue;
    if (sock && sock->ready) continue;  // the answer is there: the wait is about to end
    out.push_back(dns_wait(ctx, w, p, sock, frame));
  }
  return out;
}

}  // namespace hangtrace::rules

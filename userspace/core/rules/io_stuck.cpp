// io-stuck: threads of the job inside a read or write of a file that has not
// moved for --stall-after -- a FUSE daemon that does not answer, an NFS,
// CIFS or Lustre server that is gone, a disk that does not complete. The wait
// object (graph/fs_objects.cpp) names the file, the mount, its type and
// source, and who serves it; a FUSE daemon's own wait continues the chain.
// Progress is judged over the progress window: no CPU and no I/O bytes
// (rchar + wchar) moved, and the kernel says how long the thread has been
// off the CPU.
#include <fmt/format.h>

#include <algorithm>

#include "hangtrace/text.h"
#include "rules.h"

namespace hangtrace::rules {

namespace {

std::vector<std::string> advice_for(const FileSystemWait& fs, const RuleContext& ctx) {
  std::vector<std::string> out;
  const std::string mp = fs.mount_point.empty() ? "the mount" : fs.mount_point;
  if (!fs.server_pids.empty() || (fs.known_mount && fs.fstype.rfind("fuse", 0) == 0)) {
    std::string daemon = fs.server_pids.size() == 1 ? ctx.thread_label(fs.server_pids[0]) : "the FUSE daemon";
    out.push_back(fmt::format(
        "Check {}: it has the request and does not answer (look at its own wait and stack; restart it).",
        daemon));
    std::string abort =
        fs.fuse_connection
            ? fmt::format(", or abort the connection: 'echo 1 > /sys/fs/fuse/connections/{}/abort'",
                          *fs.fuse_connection)
            : "";
    out.push_back(
        fmt::format("To free the waiting threads: 'fusermount -u -z {}' (or 'umount -l {}'){}; the reads "
                    "then fail instead of "
                    "hanging.",
                    mp, mp, abort));
  } else if (!fs.server.empty()) {
    out.push_back(fmt::format(
        "Check the server {} and the network to it ('nfsstat -m', 'mount | grep {}', ping it): a hard mount "
        "waits for it forever; 'umount -f -l {}' gives up on it.",
        fs.server, mp, mp));
  } else {
    out.push_back(fmt::format("Check the device behind {} ({}): 'dmesg' for I/O errors and resets.", mp,
                              fs.source.empty() ? "unknown" : fs.source));
  }
  out.push_back(
      "Look in 'dmesg' for hung_task reports ('blocked for more than 120 seconds') naming these threads.");
  out.push_back(fmt::format(
      "Move the dataset to local disk (or a local cache) so the loader does not depend on {}.", mp));
  return out;
}

}  // namespace

std::vector<Finding> io_stuck_findings(const RuleContext& ctx) {
  std::vector<Finding> out;
  for (const auto& [id, o] : ctx.graph.objects) {
    if (!o.fs) continue;
    const FileSystemWait& fs = *o.fs;
    std::vector<int> stuck;
    bool all_timed = true;  // every stuck thread's time off the CPU is known
    double longest = 0;
    for (int tid : o.waiters) {
      const ThreadWait* w = ctx.wait_of(tid);
      if (!w || !ctx.in_tree(tid) || w->progressed) continue;
      if (w->blocked_s && *w->blocked_s < ctx.opt.stall_after_s) continue;
      if (!w->blocked_s) all_timed = false;
      longest = std::max(longest, w->blocked_s.value_or(0));
      add_unique(stuck, tid);
    }
    if (stuck.empty()) continue;
    std::sort(stuck.begin(), stuck.end());
    int lead = stuck.front();
    for (int tid : stuck)
      if (ctx.reachable_from_main(tid)) {
        lead = tid;
        break;
      }

    Finding f(FindingKind::IoStuck);
    f.severity = all_timed ? Severity::Critical : Severity::Warning;
    for (int tid : stuck) {
      add_unique(f.pids, ctx.pid_of(tid));
      add_unique(f.tids, tid);
    }
    ctx.add_main_chain(f, lead, o.id);
    // Who serves it, and what that one waits on in turn.
    int server_tid = 0;
    for (int pid : fs.server_pids)
      if (is_releaser(ctx.graph, o, pid)) server_tid = pid;
    if (!server_tid) server_tid = first_releaser(ctx.graph, o).value_or(0);
    if (server_tid) {
      f.chain.push_back({o.label, "can be released by", ctx.releaser_label(o, server_tid)});
      for (auto& step : ctx.chain_from(server_tid)) f.chain.push_back(std::move(step));
      add_unique(f.chain_tids, server_tid);
    } else {
      for (const auto& note : o.notes) f.chain.push_back({o.label, "note", note});
    }

    std::string where = fs.known_mount ? fmt::format(" on {} {} (source {})", fs.fstype, fs.mount_point,
                                                     fs.source.empty() ? "none" : fs.source)
                                       : "";
    std::string served = !fs.server_pids.empty() && fs.server_pids.size() == 1
                             ? fmt::format(", served by {}", ctx.thread_label(fs.server_pids[0]))
                         : !fs.server.empty() ? fmt::format(", server {}", fs.server)
                                              : "";
    const std::string what = fs.file.empty()
                                 ? "an uninterruptible wait in the kernel"
                                 : fmt::format("a {} of {}", fs.write ? "write" : "read", fs.file);
    f.summary =
        fmt::format("{} thread{} of the job stuck{} in {}{}{}: no I/O or CPU moved in the {:.3g} s window",
                    stuck.size(), stuck.size() > 1 ? "s" : "", longest > 0 ? " " + for_duration(longest) : "",
                    what, where, served, ctx.snap.sample_window_s);
    for (size_t i = 0; i < stuck.size() && i < 8; ++i) ctx.add_thread_evidence(f, stuck[i]);
    if (stuck.size() > 8) f.evidence.push_back(fmt::format("... and {} more", stuck.size() - 8));
    if (fs.known_mount)
      f.evidence.push_back(fmt::format("mount {}: type {}, source {}, options {}", fs.mount_point, fs.fstype,
                                       fs.source, fs.options));
    if (fs.fuse_connection) f.evidence.push_back(fmt::format("FUSE connection {}", *fs.fuse_connection));
    for (const auto& note : o.notes) f.evidence.push_back(note);
    f.advice = advice_for(fs, ctx);
    auto str_or_null = [](const std::string& s) {
      return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s);
    };
    f.details = {{"file", str_or_null(fs.file)},
                 {"write", fs.write},
                 {"mount_point", str_or_null(fs.mount_point)},
                 {"fstype", str_or_null(fs.fstype)},
                 {"source", str_or_null(fs.source)},
                 {"server", str_or_null(fs.server)},
                 {"server_pids", fs.server_pids},
                 {"fuse_connection",
                  fs.fuse_connection ? nlohmann::json(*fs.fuse_connection) : nlohmann::json(nullptr)},
                 {"stuck_tids", stuck},
                 {"blocked_s", longest > 0 ? nlohmann::json(longest) : nlohmann::json(nullptr)}};
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace hangtrace::rules

// hangtrace merge: one job's ranks from several hosts' bundles (merge.h).
#include "hangtrace/merge.h"
#include "hangtrace/job_identity.h"
#include "hangtrace/json_values.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <map>
#include <set>
#include <sstream>

#include "hangtrace/analysis.h"
#include "hangtrace/collectives.h"
#include "hangtrace/jobs.h"
#include "hangtrace/text.h"
#include "merge_compare.h"

namespace hangtrace {

namespace merge_detail {

std::string rank_name(const MergedRank& r) {
  std::string who = r.rank ? fmt::format("rank {}", *r.rank) : std::string("unranked process");
  return fmt::format("{} (host {}, pid {})", who, r.host.empty() ? "?" : r.host, r.pid);
}

std::string clock_utc(double t) { return format_utc_clock(t) + " UTC"; }

}  // namespace merge_detail

namespace {

using merge_detail::clock_utc;
using merge_detail::rank_name;

std::string rank_list(const std::vector<int>& ranks) {
  return fmt::format("{} {}", ranks.size() == 1 ? "rank" : "ranks", fmt::join(ranks, ", "));
}

// The processes of a bundle that are ranks: those whose environment names a
// rank, less their own children that inherited it (DataLoader workers); else
// the bundle's job process with the meta's rank.
std::vector<const ProcessInfo*> rank_processes(const LoadedBundle& b) {
  std::vector<const ProcessInfo*> out;
  const Snapshot& s = b.snapshot;
  for (const auto& p : s.processes)
    if (jobs::is_rank_process(s, p)) out.push_back(&p);
  if (!out.empty()) return out;
  const ProcessInfo* job = b.meta.job_pid ? s.process(b.meta.job_pid) : nullptr;
  if (!job) job = s.process(s.target_pid);
  if (job) out.push_back(job);
  return out;
}

MergedRank merged_rank(const LoadedBundle& b, const WaitGraph& graph, const ProcessInfo& p, bool alone) {
  MergedRank r;
  r.rank = p.rank ? p.rank : (alone ? b.meta.rank : std::nullopt);
  r.world_size = p.world_size ? p.world_size : (alone ? b.meta.world_size : std::nullopt);
  r.local_rank = p.local_rank ? p.local_rank : (alone ? b.meta.local_rank : std::nullopt);
  r.host = !b.meta.hostname.empty() ? b.meta.hostname : b.snapshot.hostname;
  r.pid = p.pid;
  r.bundle = b.path;
  r.cmdline = p.cmdline;
  r.job_id = !p.job_id.empty() ? p.job_id : (alone ? b.meta.job_id : std::string());
  r.sampled_at_unix = b.snapshot.sampled_at_unix ? b.snapshot.sampled_at_unix : b.snapshot.taken_at_unix;
  auto blocked_of = [&](int tid) -> std::optional<double> {
    if (auto it = graph.threads.find(tid); it != graph.threads.end()) return it->second.blocked_s;
    return std::nullopt;
  };
  if (auto c = process_collective(p)) {
    r.in_collective = true;
    r.op = c->call.op;
    r.backend = c->call.backend;
    r.evidence = c->call.evidence;
    r.backend_evidence = c->call.backend_evidence;
    r.collective_tid = c->tid;
    r.collective_blocked_s = blocked_of(c->tid);
    if (r.collective_blocked_s && r.sampled_at_unix)
      r.collective_since_unix = r.sampled_at_unix - *r.collective_blocked_s;
  }
  RankActivity a = rank_activity(graph, p);
  r.where = a.where;
  r.wait = a.wait;
  r.doing = a.text;
  r.main_blocked_s = a.blocked_s;
  if (alone && b.meta.last_progress_unix > 0) {
    r.stall_unix = b.meta.last_progress_unix;
    r.stall_basis = "last progress (bundle meta)";
  } else if (r.main_blocked_s && r.sampled_at_unix) {
    r.stall_unix = r.sampled_at_unix - *r.main_blocked_s;
    r.stall_basis = "main thread blocked";
  } else if (r.collective_since_unix) {
    r.stall_unix = r.collective_since_unix;
    r.stall_basis = "collective thread blocked";
  }
  r.stack = merge_detail::thread_stack(p, r.in_collective ? r.collective_tid : p.pid);
  merge_detail::place_on_local_clock(r, b);
  return r;
}

// "it is in wait_for_checkpoint_upload (train.py:64), sleeps 3.6e+03 s"
std::string instead_text(const MergedRank& r) {
  if (r.doing.rfind("in ", 0) == 0) return "it is " + r.doing;
  return "its main thread: " + r.doing;
}

void analyse_job(MergedJob& job, std::vector<std::string>& warnings) {
  std::stable_sort(job.ranks.begin(), job.ranks.end(), [](const MergedRank& a, const MergedRank& b) {
    if (a.rank.has_value() != b.rank.has_value()) return a.rank.has_value();
    return a.rank && *a.rank < *b.rank;
  });
  // Duplicate ranks (a daemon's directory holds every incident of the job):
  // the newest snapshot wins, the first given on a tie.
  std::vector<MergedRank> kept;
  for (auto& r : job.ranks) {
    if (r.rank && !kept.empty() && kept.back().rank == r.rank) {
      MergedRank& other = kept.back();
      bool newer = r.sampled_at_unix > other.sampled_at_unix;
      const MergedRank& use = newer ? r : other;
      warnings.push_back(
          fmt::format("rank {} is in two bundles: {} (host {}, pid {}) and {} (host {}, pid {}); "
                      "using the {} one, {}",
                      *r.rank, other.bundle, other.host, other.pid, r.bundle, r.host, r.pid,
                      newer ? "newer" : "first", use.bundle));
      if (newer) other = std::move(r);
      continue;
    }
    kept.push_back(std::move(r));
  }
  job.ranks = std::move(kept);
  for (const auto& r : job.ranks)
    if (r.world_size) job.world_size = std::max(job.world_size.value_or(0), *r.world_size);

  std::set<int> present;
  int top = -1;
  for (const auto& r : job.ranks)
    if (r.rank) {
      present.insert(*r.rank);
      top = std::max(top, *r.rank);
    }
  int expected = job.world_size ? *job.world_size : top + 1;
  for (int i = 0; i < expected; ++i)
    if (!present.count(i)) job.missing.push_back(i);

  // The collective the most ranks are in (ties: the one entered first).
  std::map<std::string, std::pair<int, double>> ops;  // op -> (ranks, earliest entry)
  for (const auto& r : job.ranks)
    if (r.in_collective && r.rank) {
      auto& [n, since] = ops[r.op];
      ++n;
      if (r.collective_since_unix && (!since || r.collective_since_unix < since))
        since = r.collective_since_unix;
    }
  int best = 0;
  double best_since = 0;
  for (const auto& [op, v] : ops)
    if (v.first > best || (v.first == best && v.second && (!best_since || v.second < best_since))) {
      job.collective = op;
      best = v.first;
      best_since = v.second;
    }

  if (!job.collective.empty()) {
    for (size_t i = 0; i < job.ranks.size(); ++i) {
      const MergedRank& r = job.ranks[i];
      if (!r.rank) continue;
      if (r.in_collective && r.op == job.collective) {
        job.waiting.push_back(static_cast<int>(i));
        if (job.backend.empty()) job.backend = r.backend;
        if (r.collective_since_unix &&
            (!job.waiting_since_unix || r.collective_since_unix < job.waiting_since_unix))
          job.waiting_since_unix = r.collective_since_unix;
        continue;
      }
      AbsentRank a;
      a.rank = *r.rank;
      a.has_bundle = true;
      a.index = static_cast<int>(i);
      a.reason =
          r.in_collective ? fmt::format("in {}, not {}", r.op, job.collective) : "not in any collective";
      a.doing = r.in_collective ? fmt::format("in {}: {}", r.op, r.evidence) : r.doing;
      job.absent.push_back(a);
    }
    for (int m : job.missing) {
      AbsentRank a;
      a.rank = m;
      a.reason = fmt::format("no bundle from rank {} (of {})", m, expected);
      job.absent.push_back(a);
    }
    std::sort(job.absent.begin(), job.absent.end(), [](auto& a, auto& b) { return a.rank < b.rank; });
  }
  job.hang = !job.waiting.empty() && !job.absent.empty();

  job.first_stall = merge_detail::first_stall(job.ranks);
  job.stack_groups = merge_detail::group_by_stack(job.ranks);

  // Evidence and verdict.
  std::vector<int> waiting_ranks;
  for (int i : job.waiting) {
    const MergedRank& r = job.ranks[i];
    waiting_ranks.push_back(*r.rank);
    std::string since = r.collective_since_unix
                            ? fmt::format(" since {} (blocked {:.1f} s)", clock_utc(r.collective_since_unix),
                                          *r.collective_blocked_s)
                            : "";
    job.evidence.push_back(fmt::format("{} is in {}{}: {}", rank_name(r), r.op, since, r.evidence));
    if (!r.backend_evidence.empty()) job.evidence.push_back("backend: " + r.backend_evidence);
  }
  for (const auto& a : job.absent)
    job.evidence.push_back(a.has_bundle
                               ? fmt::format("{} is {}: {}", rank_name(job.ranks[a.index]), a.reason, a.doing)
                               : a.reason);
  for (const auto& g : job.stack_groups)
    if (g.outlier)
      job.evidence.push_back(fmt::format(
          "{} stand{} out: a stack no other rank has ({}), {} share{} another",
          merge_detail::member_ranks(job.ranks, g.members), g.members.size() == 1 ? "s" : "",
          fmt::join(g.stack.begin(), g.stack.begin() + std::min<size_t>(3, g.stack.size()), " <- "),
          merge_detail::member_ranks(job.ranks, job.stack_groups.front().members),
          job.stack_groups.front().members.size() == 1 ? "s" : ""));

  if (job.hang) {
    std::vector<int> absent_ranks;
    for (const auto& a : job.absent) absent_ranks.push_back(a.rank);
    std::string who = job.absent.size() == 1 && job.absent.front().has_bundle
                          ? rank_name(job.ranks[job.absent.front().index])
                          : rank_list(absent_ranks);
    if (job.absent.size() == 1 && !job.absent.front().has_bundle) who += " (no bundle)";
    std::string since = job.waiting_since_unix ? " since " + clock_utc(job.waiting_since_unix) : "";
    std::string backend = job.backend.empty() ? "" : fmt::format(" ({})", job.backend);
    std::vector<std::string> details;
    for (const auto& a : job.absent) {
      if (!a.has_bundle)
        details.push_back(a.reason);
      else if (job.absent.size() == 1)
        details.push_back(instead_text(job.ranks[a.index]));
      else
        details.push_back(fmt::format("{} is {}", rank_name(job.ranks[a.index]), a.doing));
    }
    job.verdict = fmt::format("{} never joined {}{} that {} wait{} in{}; {}", who, job.collective, backend,
                              rank_list(waiting_ranks), waiting_ranks.size() == 1 ? "s" : "", since,
                              fmt::join(details, "; "));
  } else if (!job.collective.empty()) {
    job.verdict = fmt::format("every rank merged is in {} ({}): none is missing from it", job.collective,
                              rank_list(waiting_ranks));
  } else {
    job.verdict = fmt::format("no rank is in a collective ({} merged)", job.ranks.size());
    if (!job.missing.empty())
      job.verdict += fmt::format("; no bundle from {} (of {})", rank_list(job.missing), expected);
  }
}

using json_values::nullable;

nlohmann::json time_json(double t) { return t > 0 ? nlohmann::json(t) : nlohmann::json(nullptr); }

nlohmann::json rank_json(const MergedRank& r) {
  nlohmann::json j = {{"rank", nullable(r.rank)},
                      {"world_size", nullable(r.world_size)},
                      {"local_rank", nullable(r.local_rank)},
                      {"host", r.host},
                      {"pid", r.pid},
                      {"bundle", r.bundle},
                      {"cmdline", r.cmdline},
                      {"job_id", r.job_id},
                      {"sampled_at_unix", time_json(r.sampled_at_unix)},
                      {"in_collective", r.in_collective},
                      {"where", r.where},
                      {"wait", r.wait},
                      {"doing", r.doing},
                      {"main_blocked_s", nullable(r.main_blocked_s)},
                      {"stall_unix", time_json(r.stall_unix)},
                      {"stall_basis", r.stall_basis},
                      {"clock",
                       {{"offset_s", r.clock_offset_s},
                        {"uncertainty_s", nullable(r.clock_uncertainty_s)},
                        {"basis", r.clock_basis}}},
                      {"stack", r.stack}};
  if (r.in_collective) {
    j["collective"] = {{"op", r.op},
                       {"backend", r.backend},
                       {"tid", r.collective_tid},
                       {"evidence", r.evidence},
                       {"backend_evidence", r.backend_evidence},
                       {"blocked_s", nullable(r.collective_blocked_s)},
                       {"since_unix", time_json(r.collective_since_unix)}};
  } else {
    j["collective"] = nullptr;
  }
  return j;
}

}  // namespace

MergedReport merge_bundles(const std::vector<LoadedBundle>& bundles) {
  MergedReport out;
  // By job id, or without one by (world size or -1, command line).
  std::map<std::tuple<std::string, int, std::string>, MergedJob> jobs;
  for (const auto& b : bundles) {
    out.bundles.push_back(b.path);
    WaitGraph graph = build_wait_graph(b.snapshot);
    std::vector<const ProcessInfo*> procs = rank_processes(b);
    if (procs.empty()) {
      out.warnings.push_back(fmt::format("bundle {}: its snapshot holds no process of the job", b.path));
      continue;
    }
    for (const ProcessInfo* p : procs) {
      MergedRank r = merged_rank(b, graph, *p, procs.size() == 1);
      if (!r.rank)
        out.warnings.push_back(
            fmt::format("bundle {}: pid {} names no rank (no RANK, OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK "
                        "or SLURM_PROCID in its environment)",
                        b.path, r.pid));
      std::string cmd =
          job_cmdline(std::string(trim(r.cmdline.empty() ? b.meta.job_cmdline : r.cmdline, " \t\n")));
      MergedJob& job =
          r.job_id.empty() ? jobs[{"", r.world_size.value_or(-1), cmd}] : jobs[{r.job_id, -1, ""}];
      job.job_id = r.job_id;
      if (job.cmdline.empty()) job.cmdline = cmd;
      job.ranks.push_back(std::move(r));
    }
  }
  for (auto& [key, job] : jobs) {
    analyse_job(job, out.warnings);
    out.jobs.push_back(std::move(job));
  }
  std::stable_sort(out.jobs.begin(), out.jobs.end(),
                   [](const MergedJob& a, const MergedJob& b) { return a.ranks.size() > b.ranks.size(); });
  if (out.jobs.size() > 1) {
    std::set<int> sizes;
    std::set<std::string> ids;
    for (const auto& j : out.jobs) {
      sizes.insert(j.world_size.value_or(-1));
      ids.insert(j.job_id);
    }
    std::vector<std::string> parts;
    for (const auto& j : out.jobs)
      parts.push_back(
          fmt::format("{}world size {} ({} rank{}, {})", j.job_id.empty() ? "" : "job " + j.job_id + ", ",
                      j.world_size ? std::to_string(*j.world_size) : std::string("unknown"), j.ranks.size(),
                      j.ranks.size() == 1 ? "" : "s", j.cmdline.empty() ? "no command line" : j.cmdline));
    out.warnings.push_back(fmt::format("the bundles mix {} jobs{}: {}; each is merged on its own",
                                       out.jobs.size(),
                                       ids.size() > 1     ? " (different job ids)"
                                       : sizes.size() > 1 ? " (different world sizes)"
                                                          : " (different command lines)",
                                       fmt::join(parts, "; ")));
  }
  for (const auto& j : out.jobs)
    if (j.hang && !out.hang) {
      out.hang = true;
      out.verdict = j.verdict;
    }
  if (!out.hang) out.verdict = out.jobs.empty() ? "no rank found in the bundles" : out.jobs.front().verdict;
  return out;
}

nlohmann::json merged_report_to_json(const MergedReport& report) {
  nlohmann::json jobs = nlohmann::json::array();
  for (const auto& job : report.jobs) {
    nlohmann::json ranks = nlohmann::json::array(), absent = nlohmann::json::array(),
                   waiting = nlohmann::json::array();
    for (const auto& r : job.ranks) ranks.push_back(rank_json(r));
    for (int i : job.waiting) waiting.push_back(nullable(job.ranks[i].rank));
    for (const auto& a : job.absent) {
      nlohmann::json j = {
          {"rank", a.rank}, {"has_bundle", a.has_bundle}, {"reason", a.reason}, {"doing", a.doing}};
      if (a.has_bundle) {
        const MergedRank& r = job.ranks[a.index];
        j["host"] = r.host;
        j["pid"] = r.pid;
        j["bundle"] = r.bundle;
        j["where"] = r.where;
        j["wait"] = r.wait;
      }
      absent.push_back(j);
    }
    nlohmann::json first = nullptr;
    if (job.first_stall) {
      const MergedRank& r = job.ranks[job.first_stall->index];
      first = {{"rank", nullable(r.rank)},
               {"host", r.host},
               {"pid", r.pid},
               {"unix_time", job.first_stall->unix_time},
               {"basis", job.first_stall->basis},
               {"certain", job.first_stall->certain},
               {"order", job.first_stall->order},
               {"evidence", job.first_stall->evidence}};
    }
    nlohmann::json groups = nlohmann::json::array();
    for (const auto& g : job.stack_groups) {
      nlohmann::json members = nlohmann::json::array();
      for (int i : g.members) members.push_back(nullable(job.ranks[i].rank));
      groups.push_back({{"ranks", members}, {"outlier", g.outlier}, {"stack", g.stack}});
    }
    jobs.push_back({{"job_id", job.job_id},
                    {"world_size", nullable(job.world_size)},
                    {"cmdline", job.cmdline},
                    {"hang", job.hang},
                    {"verdict", job.verdict},
                    {"collective", job.collective},
                    {"backend", job.backend},
                    {"waiting_since_unix", time_json(job.waiting_since_unix)},
                    {"waiting", waiting},
                    {"absent", absent},
                    {"missing", job.missing},
                    {"first_stall", first},
                    {"stack_groups", groups},
                    {"ranks", ranks},
                    {"evidence", job.evidence}});
  }
  return {{"schema", kMergeSchema},
          {"verdict", {{"status", report.hang ? "hang" : "ok"}, {"summary", report.verdict}}},
          {"bundles", report.bundles},
          {"warnings", report.warnings},
          {"jobs", jobs}};
}

std::string render_merged_text(const MergedReport& report) {
  std::string out = fmt::format("hangtrace merge: {} bundle{}, {} job{}\n", report.bundles.size(),
                                report.bundles.size() == 1 ? "" : "s", report.jobs.size(),
                                report.jobs.size() == 1 ? "" : "s");
  out += fmt::format("verdict: {}: {}\n", report.hang ? "HANG" : "no missing rank", report.verdict);
  for (const auto& w : report.warnings) out += "warning: " + w + "\n";
  for (const auto& job : report.jobs) {
    out += fmt::format(
        "\njob: {}world size {}, {} rank{} merged{}\n", job.job_id.empty() ? "" : job.job_id + ", ",
        job.world_size ? std::to_string(*job.world_size) : std::string("unknown"), job.ranks.size(),
        job.ranks.size() == 1 ? "" : "s", job.cmdline.empty() ? "" : ": " + job.cmdline);
    if (report.jobs.size() > 1) out += "  " + job.verdict + "\n";
    for (const auto& r : job.ranks) {
      std::string what;
      if (r.in_collective) {
        what = fmt::format("in {}{}", r.op, r.backend.empty() ? "" : " (" + r.backend + ")");
        if (r.collective_since_unix)
          what += fmt::format(" since {} ({:.1f} s)", clock_utc(r.collective_since_unix),
                              *r.collective_blocked_s);
      } else {
        what = r.doing;
      }
      out += fmt::format("  {:<8} host {:<16} pid {:<8} {}\n",
                         r.rank ? fmt::format("rank {}", *r.rank) : "no rank", r.host, r.pid, what);
    }
    for (int m : job.missing) out += fmt::format("  rank {:<3}   no bundle\n", m);
    if (!job.absent.empty() && !job.collective.empty()) {
      out += fmt::format("missing from {}:\n", job.collective);
      for (const auto& a : job.absent)
        out += a.has_bundle ? fmt::format("  {}: {}; {}\n", rank_name(job.ranks[a.index]), a.reason, a.doing)
                            : fmt::format("  rank {}: {}\n", a.rank, a.reason);
    }
    if (job.first_stall) {
      const MergedRank& r = job.ranks[job.first_stall->index];
      out += fmt::format("first to stall: {} at {} ({}){}\n", rank_name(r),
                         clock_utc(job.first_stall->unix_time), job.first_stall->basis,
                         job.first_stall->order.empty() ? "" : "; " + job.first_stall->order);
      for (const auto& e : job.first_stall->evidence) out += "  " + e + "\n";
    }
    if (job.stack_groups.size() > 1) {
      out += fmt::format("ranks by stack ({} groups):\n", job.stack_groups.size());
      for (const auto& g : job.stack_groups)
        out += fmt::format(
            "  {}{}: {}\n", merge_detail::member_ranks(job.ranks, g.members), g.outlier ? " (outlier)" : "",
            fmt::join(g.stack.begin(), g.stack.begin() + std::min<size_t>(4, g.stack.size()), " <- "));
    }
    if (!job.evidence.empty()) {
      out += "evidence:\n";
      for (const auto& e : job.evidence) out += "  " + e + "\n";
    }
  }
  return out;
}

int merge_exit_status(const MergedReport& report) { return report.hang ? 2 : 0; }

}  // namespace hangtrace

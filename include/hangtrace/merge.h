// hangtrace merge: one job's ranks, from the postmortem bundles of several
// hosts (one bundle per rank, or per host holding several local ranks).
//
// Each bundle's snapshot says, per rank process, whether it is inside a
// torch.distributed collective (collectives.h) and, if not, what its main
// thread is doing instead. Merged, they answer the multi-host questions one
// host cannot: which rank is missing from the collective the others wait in
// (or sent no bundle at all), what it does instead, and which rank stalled
// first. Pure: no I/O (the CLI reads the bundles, read_bundle in bundle.h).
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "hangtrace/bundle.h"

namespace hangtrace {

inline constexpr const char* kMergeSchema = "hangtrace.merge/1";

// One rank process, as its bundle shows it.
struct MergedRank {
  std::optional<int> rank;  // unset: the bundle names no rank
  std::optional<int> world_size, local_rank;
  std::string host;
  int pid = 0;
  std::string bundle;  // the bundle's path
  std::string cmdline;
  std::string job_id;          // job_identity.h; "" when its environment names no job
  double sampled_at_unix = 0;  // when its blocked times were read

  // Inside a collective: which, on which thread, since when.
  bool in_collective = false;
  std::string op, backend, evidence, backend_evidence;
  int collective_tid = 0;
  std::optional<double> collective_blocked_s;  // that thread's time off CPU
  double collective_since_unix = 0;            // sampled_at_unix - collective_blocked_s (0: unknown)

  // What its main thread is doing (its innermost Python frame and wait).
  std::string where, wait, doing;
  std::optional<double> main_blocked_s;

  // When it stopped making progress: the bundle's last_progress_unix when the
  // bundle is about this rank alone, else when its main thread entered the
  // wait it is in. 0: unknown.
  double stall_unix = 0;
  std::string stall_basis;  // "last progress (bundle meta)", "main thread blocked", ""

  // Its host's clock against the merging host's: stall_unix and the other
  // times above are corrected by clock_offset_s (measured when the bundle was
  // fetched from its daemon; 0 otherwise), and may be off by up to
  // clock_uncertainty_s (unset: unknown, an unsynchronized clock and nothing
  // measured). Ranks of one host share a clock and compare exactly.
  double clock_offset_s = 0;
  std::optional<double> clock_uncertainty_s;
  std::string clock_basis;  // how the above is known, in words

  // The stack of the thread that matters (the collective's, else the main
  // thread), innermost first: Python frames "function (file:line)", else
  // native function names. Ranks are grouped by it.
  std::vector<std::string> stack;
};

// Ranks whose threads that matter have the same stack.
struct StackGroup {
  std::vector<int> members;  // indices into MergedJob::ranks
  std::vector<std::string> stack;
  bool outlier = false;  // smaller than the one largest group
};

// A rank the collective needs that is not in it.
struct AbsentRank {
  int rank = -1;
  bool has_bundle = false;
  int index = -1;  // into MergedJob::ranks when has_bundle
  std::string
      reason;         // "not in any collective", "in barrier, not all_reduce", "no bundle from rank 3 (of 4)"
  std::string doing;  // what it does instead ("" without a bundle)
};

struct FirstStall {
  int index = -1;        // into MergedJob::ranks
  double unix_time = 0;  // on the merging host's clock
  std::string basis;
  // Whether it stalled before the next rank by more than their clocks may
  // differ; `order` says by how much, or why the order is not certain.
  bool certain = true;
  std::string order;
  std::vector<std::string> evidence;  // one line per rank compared, earliest first
};

// The ranks of one job: the same job id (job_identity.h), or without one the
// same world size and command line.
struct MergedJob {
  std::string job_id;
  std::optional<int> world_size;
  std::string cmdline;
  std::vector<MergedRank> ranks;  // by rank (unranked ones last)
  std::vector<int> missing;       // ranks < world_size without a bundle
  // The collective the most ranks are in ("" when none is), and its backend.
  std::string collective, backend;
  std::vector<int> waiting;       // indices into ranks: in `collective`
  double waiting_since_unix = 0;  // the earliest waiting rank's entry into it (0: unknown)
  std::vector<AbsentRank> absent;
  std::optional<FirstStall> first_stall;
  std::vector<StackGroup> stack_groups;  // the largest first
  bool hang = false;                     // ranks wait in a collective that some rank is missing from
  std::string verdict;                   // one line
  std::vector<std::string> evidence;
};

struct MergedReport {
  std::vector<std::string> bundles;   // the paths merged, in order
  std::vector<MergedJob> jobs;        // the job with the most ranks first
  std::vector<std::string> warnings;  // mixed jobs, duplicate ranks, bundles without ranks
  bool hang = false;                  // any job's
  std::string verdict;                // the first hung job's verdict, else the first job's
};

MergedReport merge_bundles(const std::vector<LoadedBundle>& bundles);

nlohmann::json merged_report_to_json(const MergedReport& report);
std::string render_merged_text(const MergedReport& report);

// Exit status: 2 when a rank is absent from a collective others wait in, else 0.
int merge_exit_status(const MergedReport& report);

}  // namespace hangtrace

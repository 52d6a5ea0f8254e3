// Comparing one job's ranks across hosts (merge.cpp's helpers): their clocks,
// so that stall times from several hosts can be ordered, and their stacks,
// so that the rank doing something else stands out.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "hangtrace/bundle.h"
#include "hangtrace/merge.h"

namespace hangtrace::merge_detail {

// "rank 3 (host node-7, pid 4242)"; "12:00:01.250 UTC" (merge.cpp).
std::string rank_name(const MergedRank& r);
std::string clock_utc(double t);

// The stack of thread `tid` of `p`, as MergedRank::stack (bounded: the 16
// innermost frames).
std::vector<std::string> thread_stack(const ProcessInfo& p, int tid);

// Sets r's clock offset, uncertainty and basis from how bundle `b` came
// (fetched: its measured offset) and its meta's clock sample, and moves r's
// times onto the merging host's clock.
void place_on_local_clock(MergedRank& r, const LoadedBundle& b);

// The first rank to stall of `ranks` (those with a stall time), and whether
// that is certain given their clocks.
std::optional<FirstStall> first_stall(const std::vector<MergedRank>& ranks);

// Ranks grouped by identical stack, the largest group first; with one group
// larger than every other, the others are outliers.
std::vector<StackGroup> group_by_stack(const std::vector<MergedRank>& ranks);

// "ranks 0-2, 4" for indices into `ranks`.
std::string member_ranks(const std::vector<MergedRank>& ranks, const std::vector<int>& members);

}  // namespace hangtrace::merge_detail

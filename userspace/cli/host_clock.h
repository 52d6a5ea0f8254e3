// This host's wall clock, and its NTP state as the kernel keeps it: what a
// bundle records of its clock and what the daemon's bundle index answers
// with, so that `hangtrace merge` can compare times from several hosts.
#pragma once

#include "hangtrace/bundle.h"

namespace hangtrace::cli {

// CLOCK_REALTIME, seconds since the epoch.
double wall_clock_unix();

// adjtimex(2) read-only: synchronized unless the kernel says STA_UNSYNC or
// TIME_ERROR, with its maximum and estimated errors.
HostClock sample_host_clock();

}  // namespace hangtrace::cli

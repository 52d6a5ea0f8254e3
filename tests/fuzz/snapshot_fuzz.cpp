// The snapshot loader (snapshot_from_json_text, userspace/core/snapshot_json.cpp)
// that `hangtrace --from-snapshot FILE` runs, and what that command does
// with what loaded: diagnose, the text and JSON reports, and the JSON round
// trip. Seeds: snapshots written by `hangtrace --pid P --save-snapshot F`
// of live python3 processes (blocked in a lock, in sleep, in a socket read),
// and of the unit tests' fixtures.
#include "fuzz_support.h"
#include "hangtrace/analysis.h"
#include "hangtrace/report.h"
#include "hangtrace/snapshot_json.h"

using namespace hangtrace;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto snap = snapshot_from_json_text(std::string(fuzz::as_text(data, size)));
  if (!snap) return 0;
  Diagnosis d = diagnose(*snap);
  (void)exit_status_for(d);
  (void)render_text(*snap, d);
  (void)render_json_text(*snap, d);
  // What it loaded saves and loads again.
  auto again = snapshot_from_json(snapshot_to_json(*snap));
  fuzz::check(static_cast<bool>(again));
  return 0;
}

// The ring-buffer record decoder: the raw records the BPF programs submit
// (struct ht_*_event, include/hangtrace/abi.h) as the live session consumes
// them (userspace/cli/live_session.cpp: Aggregator::add_raw's hot path for
// futex and syscall records, else decode_event + Aggregator::add;
// userspace/core/live.cpp, live_wait_totals.cpp), then the observation
// closed and used as a live window is: diagnose, the text report and the
// "live" JSON. This also covers the hangtrace side of CUPTI's records
// (HT_EV_GPU_ACTIVITY, what the injection library hands the USDT probe).
// Input: records, each a little-endian u16 length and that many bytes.
// Seeds: one record of every type with the values of a real
// trace, and a mixed stream (tests/fuzz/README.md).
#include "fuzz_support.h"
#include "hangtrace/abi.h"
#include "hangtrace/analysis.h"
#include "hangtrace/live.h"
#include "hangtrace/report.h"

using namespace hangtrace;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Aggregator agg(8, 64);
  size_t pos = 0, records = 0;
  uint64_t first_ts = ~0ull, last_ts = 0;
  while (pos + 2 <= size && records < 4096) {
    size_t len = data[pos] | (size_t{data[pos + 1]} << 8);
    pos += 2;
    len = std::min(len, size - pos);
    // The ring buffer hands out 8-byte aligned records: so does this.
    std::vector<uint64_t> buf(len / 8 + 1);
    std::memcpy(buf.data(), data + pos, len);
    pos += len;
    ++records;
    const void* rec = buf.data();
    if (len >= sizeof(ht_event_header)) {
      ht_event_header h;
      std::memcpy(&h, rec, sizeof h);
      first_ts = std::min<uint64_t>(first_ts, h.ts_ns);
      last_ts = std::max<uint64_t>(last_ts, h.ts_ns);
    }
    if (agg.add_raw(rec, len) != Aggregator::Raw::NotHot) continue;
    auto e = decode_event(rec, len);
    if (!e) continue;
    (void)event_type_name(e->type);
    (void)shm_op_name(e->shm_op);
    fuzz::check(e->comm.size() < HT_COMM_LEN && e->file.size() < HT_FILE_NAME_LEN);
    agg.add(*e);
  }
  if (first_ts > last_ts) first_ts = last_ts = 0;
  (void)agg.observation();
  LiveObservation live = agg.finish(first_ts, last_ts, records, 0);
  Snapshot snap;
  Diagnosis d = diagnose(snap, {}, &live);
  (void)render_text(snap, d, {}, &live);
  // As the reports dump it: what came from a target may be any bytes.
  (void)live_json(&live).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return 0;
}

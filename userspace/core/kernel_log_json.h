// The snapshot's "kernel_log" member (snapshot_json.cpp's part for the
// kernel's own record of deaths: docs/json-schema.md).
#pragma once

#include <nlohmann/json.hpp>

#include "hangtrace/model.h"

namespace hangtrace {

nlohmann::json kernel_log_to_json(const Snapshot& s);
// Reads what `j` holds into `s`; an event of a kind this build does not know
// is left out, and at most kMaxKernelLogEvents are kept.
void kernel_log_from_json(const nlohmann::json& j, Snapshot& s);

}  // namespace hangtrace

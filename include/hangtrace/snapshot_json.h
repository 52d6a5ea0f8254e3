// Snapshot <-> JSON ("hangtrace.snapshot/1"): saved snapshots can be analysed
// later (--from-snapshot), attached to bug reports, and used as test fixtures.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "hangtrace/model.h"
#include "hangtrace/result.h"

namespace hangtrace {

inline constexpr const char* kSnapshotSchema = "hangtrace.snapshot/1";

nlohmann::json snapshot_to_json(const Snapshot& snapshot);
// Validates as it reads: a corrupt or foreign file gives an error, never a crash.
Result<Snapshot> snapshot_from_json(const nlohmann::json& j);
Result<Snapshot> snapshot_from_json_text(const std::string& text);

}  // namespace hangtrace

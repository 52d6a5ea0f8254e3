// Names of the finding registry (finding_kinds.h) and of severities and
// confidences.
#include "hangtrace/analysis.h"
#include "hangtrace/finding_kinds.h"

namespace hangtrace {

std::optional<FindingKind> finding_kind_from_name(std::string_view name) {
  for (const auto& k : kFindingKinds)
    if (name == k.name) return k.kind;
  return std::nullopt;
}

const char* severity_name(Severity s) {
  switch (s) {
    case Severity::Info:
      return "info";
    case Severity::Warning:
      return "warning";
    case Severity::Critical:
      return "critical";
  }
  return "info";
}

const char* confidence_name(Confidence c) { return c == Confidence::Certain ? "certain" : "probable"; }

}  // namespace hangtrace

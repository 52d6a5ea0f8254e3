// The "cupti" concern (bpf/cupti.bpf.c): GPU activity records from
// hangtrace's CUPTI injection library, through its USDT probe.
#pragma once

#include <optional>
#include <string>

namespace hangtrace {

// The file name the concern attaches to when a traced process maps it.
inline constexpr const char* kCuptiInjectionLibraryName = "libhangtrace_cupti.so";

// The injection library beside the hangtrace binary: <bindir>/lib/ in a
// build tree, <prefix>/lib/hangtrace/ once installed (binary in <prefix>/bin).
// For launch mode's CUDA_INJECTION64_PATH; nothing when neither exists.
std::optional<std::string> find_cupti_injection_library();
// The same, for a hangtrace binary at `exe_path`.
std::optional<std::string> find_cupti_injection_library(const std::string& exe_path);

}  // namespace hangtrace

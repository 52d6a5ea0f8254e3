// Kernel symbolization from kallsyms (root makes the addresses real).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "hangtrace/result.h"

namespace hangtrace {

class KernelSymbols {
 public:
  // Parses the text of /proc/kallsyms (text/weak symbols only). Fails when the
  // addresses are all zero (kptr_restrict without privilege).
  static Result<KernelSymbols> parse(std::string_view kallsyms_text);
  // Reads <proc_root>/kallsyms.
  static Result<KernelSymbols> load(const std::string& proc_root = "/proc");

  // "futex_wait_queue+0x5f/0x90"-style name, "0xffffffff81234567" if unknown.
  std::string symbolize(uint64_t addr) const;
  // Just the function name ("futex_wait_queue"), empty if unknown.
  std::string function(uint64_t addr) const;
  size_t size() const { return symbols_.size(); }

 private:
  struct Symbol {
    uint64_t addr;
    std::string name;
  };
  std::vector<Symbol> symbols_;  // sorted by addr
};

}  // namespace hangtrace

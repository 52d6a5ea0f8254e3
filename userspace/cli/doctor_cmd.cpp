// Placeholder until the doctor subcommand lands; replaced by its implementation.
#include "subcommands.h"

namespace hangtrace::cli {

Subcommand add_doctor_subcommand(CLI::App& parent) {
  Subcommand s;
  s.app = parent.add_subcommand("doctor", "(not built yet)");
  s.run = [] { return fail("doctor: not built yet"); };
  return s;
}

}  // namespace hangtrace::cli

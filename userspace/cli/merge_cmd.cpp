// Placeholder until the merge subcommand lands; replaced by its implementation.
#include "subcommands.h"

namespace hangtrace::cli {

Subcommand add_merge_subcommand(CLI::App& parent) {
  Subcommand s;
  s.app = parent.add_subcommand("merge", "(not built yet)");
  s.run = [] { return fail("merge: not built yet"); };
  return s;
}

}  // namespace hangtrace::cli

// Placeholder until the daemon subcommand lands; replaced by its implementation.
#include "subcommands.h"

namespace hangtrace::cli {

Subcommand add_daemon_subcommand(CLI::App& parent) {
  Subcommand s;
  s.app = parent.add_subcommand("daemon", "(not built yet)");
  s.run = [] { return fail("daemon: not built yet"); };
  return s;
}

}  // namespace hangtrace::cli

// The daemon's HTTP server: /metrics (the Prometheus text format of its
// registry) and, when enabled, its bundles read-only: /bundles (an index,
// JSON: bundle_archive.h) and /bundles/NAME (one bundle as a tar archive,
// streamed). On civetweb, which prometheus-cpp's own Exposer is built on,
// owned here so that it can serve more than /metrics.
#pragma once

#include <prometheus/registry.h>

#include <memory>
#include <string>

#include "hangtrace/result.h"

class CivetServer;

namespace hangtrace::cli {

struct HttpOptions {
  std::string address;     // "127.0.0.1:9464"
  std::string bundle_dir;  // the bundles /bundles serves; "" serves none
  // A file whose first line is the token a request for /bundles must carry
  // ("Authorization: Bearer TOKEN"); "" none, allowed on loopback only.
  std::string token_file;
  std::string hostname;  // named in the index
};

class DaemonHttp {
 public:
  static Result<std::unique_ptr<DaemonHttp>> start(const HttpOptions& options,
                                                   std::shared_ptr<prometheus::Registry> registry);
  ~DaemonHttp();
  // "127.0.0.1:9464", with the port the kernel picked for ":0".
  std::string bound_address() const;

 private:
  DaemonHttp() = default;
  struct Handlers;
  HttpOptions options_;
  std::string token_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<Handlers> handlers_;
  std::unique_ptr<CivetServer> server_;  // declared last: stopped before the handlers go
};

}  // namespace hangtrace::cli

#include "daemon_http.h"

#include <CivetServer.h>
#include <fcntl.h>
#include <prometheus/text_serializer.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cstring>
#include <fstream>
#include <string_view>

#include "hangtrace/bundle.h"
#include "hangtrace/bundle_archive.h"
#include "hangtrace/text.h"
#include "token_file.h"
#include "host_clock.h"

namespace hangtrace::cli {

namespace {

constexpr const char* kBundlesPath = "/bundles";

// Equal, in a time that does not depend on where they differ.
bool same_secret(std::string_view expected, std::string_view given) {
  if (expected.empty() || given.size() != expected.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < expected.size(); ++i) diff |= static_cast<unsigned char>(expected[i] ^ given[i]);
  return diff == 0;
}

// A whole answer: status, type, length, the body; never cached.
void send(mg_connection* conn, int status, const char* content_type, const std::string& body) {
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
            "Cache-Control: no-store\r\nConnection: close\r\n\r\n",
            status, mg_get_response_code_text(conn, status), content_type, body.size());
  mg_write(conn, body.data(), body.size());
}

void send_text(mg_connection* conn, int status, const std::string& body) {
  send(conn, status, "text/plain; charset=utf-8", body);
}

// Whether HOST:PORT binds only the loopback interface (127.0.0.0/8, [::1],
// "localhost"): bundles served anywhere else need a token.
bool loopback_address(const std::string& address) {
  std::string host = address.substr(0, address.rfind(':'));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return host == "localhost" || host == "::1" || host.starts_with("127.");
}

class MetricsHandler final : public CivetHandler {
 public:
  explicit MetricsHandler(std::shared_ptr<prometheus::Registry> registry) : registry_(std::move(registry)) {}
  bool handleGet(CivetServer*, mg_connection* conn) override {
    send(conn, 200, "text/plain; version=0.0.4; charset=utf-8",
         prometheus::TextSerializer().Serialize(registry_->Collect()));
    return true;
  }

 private:
  std::shared_ptr<prometheus::Registry> registry_;
};

class BundlesHandler final : public CivetHandler {
 public:
  BundlesHandler(const HttpOptions& o, const std::string& token) : o_(o), token_(token) {}

  bool handleGet(CivetServer*, mg_connection* conn) override {
    if (!authorized(conn)) {
      mg_printf(conn,
                "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer\r\nContent-Length: 0\r\n"
                "Connection: close\r\n\r\n");
      return true;
    }
    const mg_request_info* request = mg_get_request_info(conn);
    std::string_view uri = request && request->local_uri ? request->local_uri : "";
    const std::string prefix = std::string(kBundlesPath) + "/";
    if (uri == kBundlesPath || uri == prefix) return index(conn);
    if (!uri.starts_with(prefix)) {
      send_text(conn, 404, "no such bundle\n");
      return true;
    }
    std::string_view name = uri.substr(prefix.size());
    if (name.ends_with(".tar")) name.remove_suffix(4);
    return archive(conn, std::string(name));
  }

 private:
  bool authorized(mg_connection* conn) const {
    if (token_.empty()) return true;
    const char* header = mg_get_header(conn, "Authorization");
    std::string_view h = header ? header : "";
    return h.starts_with("Bearer ") && same_secret(token_, h.substr(7));
  }

  bool index(mg_connection* conn) const {
    auto bundles = list_bundles(o_.bundle_dir);
    if (!bundles) {
      send_text(conn, 500, bundles.error() + "\n");
      return true;
    }
    send(conn, 200, "application/json",
         bundle_index_json(*bundles, o_.hostname, wall_clock_unix()).dump(1) + "\n");
    return true;
  }

  // Only a finished bundle the listing itself names: never a path the
  // request makes up, a temporary, or a link.
  bool archive(mg_connection* conn, const std::string& name) const {
    if (!plain_bundle_name(name)) {
      send_text(conn, 404, "no such bundle\n");
      return true;
    }
    auto bundles = list_bundles(o_.bundle_dir);
    const BundleEntry* found = nullptr;
    if (bundles)
      for (const auto& b : *bundles)
        if (b.name == name) found = &b;
    if (!found) {
      send_text(conn, 404, "no such bundle\n");
      return true;
    }
    mg_printf(conn,
              "HTTP/1.1 200 OK\r\nContent-Type: application/x-tar\r\n"
              "Content-Disposition: attachment; filename=\"%s.tar\"\r\nTransfer-Encoding: chunked\r\n"
              "Cache-Control: no-store\r\nConnection: close\r\n\r\n",
              name.c_str());
    (void)write_bundle_tar(found->path, name, [conn](std::string_view piece) {
      return mg_send_chunk(conn, piece.data(), static_cast<unsigned>(piece.size())) > 0;
    });
    mg_send_chunk(conn, "", 0);
    return true;
  }

  const HttpOptions& o_;
  const std::string& token_;
};

}  // namespace

struct DaemonHttp::Handlers {
  std::unique_ptr<MetricsHandler> metrics;
  std::unique_ptr<BundlesHandler> bundles;
};

Result<std::unique_ptr<DaemonHttp>> DaemonHttp::start(const HttpOptions& options,
                                                      std::shared_ptr<prometheus::Registry> registry) {
  std::unique_ptr<DaemonHttp> h(new DaemonHttp());
  h->options_ = options;
  h->registry_ = std::move(registry);
  if (!options.bundle_dir.empty()) {
    if (!options.token_file.empty()) {
      auto token = read_token_file(options.token_file);
      if (!token) return make_error(token.error());
      h->token_ = std::move(*token);
    } else if (!loopback_address(options.address)) {
      return make_error(fmt::format(
          "failed to serve bundles on {}: beyond the loopback interface they need --bundle-token-file",
          options.address));
    }
  }
  h->handlers_ = std::make_unique<Handlers>();
  h->handlers_->metrics = std::make_unique<MetricsHandler>(h->registry_);
  if (!options.bundle_dir.empty())
    h->handlers_->bundles = std::make_unique<BundlesHandler>(h->options_, h->token_);
  // Two threads, as prometheus-cpp's Exposer ran; a bundle streaming to a
  // slow client holds one. Directory listings and files outside the
  // handlers are never served (no document_root).
  std::vector<std::string> civet = {"listening_ports",    options.address, "num_threads", "2",
                                    "request_timeout_ms", "30000"};
  try {
    h->server_ = std::make_unique<CivetServer>(civet);
  } catch (const std::exception& e) {
    return make_error(fmt::format("failed to serve on {}: {}", options.address, e.what()));
  }
  h->server_->addHandler("/metrics", h->handlers_->metrics.get());
  if (h->handlers_->bundles) h->server_->addHandler(kBundlesPath, h->handlers_->bundles.get());
  return h;
}

DaemonHttp::~DaemonHttp() {
  if (server_) server_->close();
}

std::string DaemonHttp::bound_address() const {
  if (!server_) return "";
  auto ports = server_->getListeningPorts();
  if (ports.empty()) return "";
  // The host as asked ("0.0.0.0" in a pod), the port as bound (":0" picks one).
  std::string host = options_.address.substr(0, options_.address.rfind(':'));
  return fmt::format("{}:{}", host.empty() ? "127.0.0.1" : host, ports.front());
}

}  // namespace hangtrace::cli

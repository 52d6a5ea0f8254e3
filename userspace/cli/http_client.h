// A bounded HTTP GET (libcurl): what `hangtrace merge` asks daemons and
// Prometheus with. Answers come from other hosts: their size is capped, no
// redirect is followed, only http and https are spoken.
#pragma once

#include <cstddef>
#include <string>

#include "hangtrace/result.h"

namespace hangtrace::cli {

struct HttpAnswer {
  std::string body;
  double sent_unix = 0, received_unix = 0;  // wall clock around the request
};

struct HttpRequest {
  std::string url;
  std::string bearer_token;  // "" sends none
  size_t max_bytes = 8u << 20;
  double timeout_s = 30;
};

// The body of a 200 answer; otherwise "failed to fetch URL: why" (the
// connection, a timeout, an answer over max_bytes, the HTTP status).
Result<HttpAnswer> http_get(const HttpRequest& request);

// `text` percent-encoded for a URL's query.
std::string url_encode(const std::string& text);

}  // namespace hangtrace::cli

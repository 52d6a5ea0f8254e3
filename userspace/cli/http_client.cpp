#include "http_client.h"

#include <curl/curl.h>
#include <fmt/format.h>

#include <cctype>
#include <memory>
#include <mutex>

#include "host_clock.h"

namespace hangtrace::cli {

namespace {

struct Sink {
  std::string* body;
  size_t max_bytes;
  bool overflow = false;
};

size_t write_body(char* data, size_t size, size_t count, void* user) {
  auto* sink = static_cast<Sink*>(user);
  const size_t n = size * count;
  if (sink->body->size() + n > sink->max_bytes) {
    sink->overflow = true;
    return 0;  // curl stops: CURLE_WRITE_ERROR
  }
  sink->body->append(data, n);
  return n;
}

std::string status_text(long status) {
  switch (status) {
    case 401:
      return "HTTP 401: a token is needed (--token-file) or the one sent is wrong";
    case 403:
      return "HTTP 403: forbidden";
    case 404:
      return "HTTP 404: not found there (bundles not served? --serve-bundles)";
    default:
      return fmt::format("HTTP {}", status);
  }
}

}  // namespace

Result<HttpAnswer> http_get(const HttpRequest& request) {
  static std::once_flag init;
  std::call_once(init, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  auto failed = [&](const std::string& why) {
    return make_error(fmt::format("failed to fetch {}: {}", request.url, why));
  };
  std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> curl(curl_easy_init(), curl_easy_cleanup);
  if (!curl) return failed("curl_easy_init failed");
  HttpAnswer answer;
  Sink sink{&answer.body, request.max_bytes};
  char error[CURL_ERROR_SIZE] = "";
  std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)> headers(nullptr, curl_slist_free_all);
  if (!request.bearer_token.empty())
    headers.reset(curl_slist_append(nullptr, ("Authorization: Bearer " + request.bearer_token).c_str()));
  CURL* c = curl.get();
  curl_easy_setopt(c, CURLOPT_URL, request.url.c_str());
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(request.timeout_s * 1000));
  curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(request.max_bytes));
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, write_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &sink);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(c, CURLOPT_USERAGENT, "hangtrace-merge");
  if (headers) curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
  answer.sent_unix = wall_clock_unix();
  const CURLcode rc = curl_easy_perform(c);
  answer.received_unix = wall_clock_unix();
  if (sink.overflow || rc == CURLE_FILESIZE_EXCEEDED)
    return failed(fmt::format("the answer exceeds {} MiB", request.max_bytes >> 20));
  if (rc != CURLE_OK) return failed(error[0] ? error : curl_easy_strerror(rc));
  long status = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  if (status != 200) return failed(status_text(status));
  return answer;
}

std::string url_encode(const std::string& text) {
  std::string out;
  for (unsigned char ch : text) {
    if (std::isalnum(ch) || ch == '-' || ch == '_' || ch == '.' || ch == '~')
      out += static_cast<char>(ch);
    else
      out += fmt::format("%{:02X}", ch);
  }
  return out;
}

}  // namespace hangtrace::cli

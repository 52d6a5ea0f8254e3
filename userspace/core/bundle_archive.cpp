// ustar (POSIX.1-1988 as GNU tar and bsdtar read it): per file a 512-byte
// header (name, octal mode/size/mtime, checksum, typeflag '0', "ustar\0"
// "00"), then the data padded to 512; two zero blocks end the archive.
#include "hangtrace/bundle_archive.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <optional>

#include "hangtrace/json_values.h"
#include "hangtrace/text.h"

namespace hangtrace {

namespace {

constexpr size_t kBlock = 512;
constexpr size_t kPiece = 64 * 1024;
constexpr size_t kMaxFiles = 64;
constexpr size_t kMaxTotalBytes = size_t{256} << 20;

using Header = std::array<char, kBlock>;

void octal(Header& h, size_t offset, size_t width, uint64_t value) {
  // width - 1 digits and a NUL.
  std::string digits = fmt::format("{:0{}o}", value, width - 1);
  std::memcpy(h.data() + offset, digits.data(), std::min(digits.size(), width - 1));
}

uint64_t checksum(const Header& h) {
  uint64_t sum = 0;
  for (size_t i = 0; i < kBlock; ++i) sum += (i >= 148 && i < 156) ? ' ' : static_cast<unsigned char>(h[i]);
  return sum;
}

Result<Header> file_header(const std::string& dir_name, const std::string& file, uint64_t size,
                           uint64_t mtime) {
  Header h{};
  // name (100) holds "NAME/file" when it fits, else prefix (155) NAME and name the file.
  const std::string full = dir_name + "/" + file;
  if (full.size() <= 100) {
    std::memcpy(h.data(), full.data(), full.size());
  } else if (dir_name.size() <= 155 && file.size() <= 100) {
    std::memcpy(h.data() + 345, dir_name.data(), dir_name.size());
    std::memcpy(h.data(), file.data(), file.size());
  } else {
    return make_error(fmt::format("failed to archive {}: the name is too long", full));
  }
  octal(h, 100, 8, 0644);
  octal(h, 108, 8, 0);
  octal(h, 116, 8, 0);
  octal(h, 124, 12, size);
  octal(h, 136, 12, mtime);
  h[156] = '0';
  std::memcpy(h.data() + 257, "ustar", 6);  // with its NUL
  std::memcpy(h.data() + 263, "00", 2);
  octal(h, 148, 7, checksum(h));  // six digits, NUL, then the space already counted
  h[155] = ' ';
  return h;
}

std::optional<uint64_t> parse_octal(std::string_view field) {
  uint64_t v = 0;
  bool any = false;
  for (char c : field) {
    if (c == '\0' || c == ' ') {
      if (any) break;
      continue;
    }
    if (c < '0' || c > '7' || v > (uint64_t{1} << 60)) return std::nullopt;
    v = v * 8 + static_cast<uint64_t>(c - '0');
    any = true;
  }
  return any ? std::optional<uint64_t>(v) : std::nullopt;
}

std::string c_field(std::string_view block, size_t offset, size_t width) {
  std::string_view f = block.substr(offset, width);
  return std::string(f.substr(0, f.find('\0')));
}

}  // namespace

nlohmann::json bundle_index_json(const std::vector<BundleEntry>& bundles, const std::string& hostname,
                                 double now_unix) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& b : bundles) {
    uint64_t bytes = 0;
    std::error_code ec;
    for (const auto& f : std::filesystem::directory_iterator(b.path, ec))
      if (f.is_regular_file(ec) && !f.is_symlink(ec)) bytes += f.file_size(ec);
    const BundleMeta& m = b.meta;
    list.push_back({{"name", b.name},
                    {"bytes", bytes},
                    {"trigger", m.trigger},
                    {"cause", m.cause},
                    {"verdict", m.verdict},
                    {"summary", m.summary},
                    {"job_id", m.job_id},
                    {"rank", json_values::nullable(m.rank)},
                    {"world_size", json_values::nullable(m.world_size)},
                    {"hostname", m.hostname},
                    {"job_pid", m.job_pid},
                    {"job_comm", m.job_comm},
                    {"created_unix", m.created_unix},
                    {"incident_unix", m.incident_unix}});
  }
  return {{"schema", kBundleIndexSchema}, {"hostname", hostname}, {"now_unix", now_unix}, {"bundles", list}};
}

Result<size_t> write_bundle_tar(const std::string& dir, const std::string& name,
                                const std::function<bool(std::string_view)>& sink) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& f : std::filesystem::directory_iterator(dir, ec)) {
    struct stat st {};
    if (lstat(f.path().c_str(), &st) == 0 && S_ISREG(st.st_mode))
      files.push_back(f.path().filename().string());
  }
  if (ec) return make_error(fmt::format("failed to list {}: {}", dir, ec.message()));
  std::sort(files.begin(), files.end());
  size_t written = 0;
  auto emit = [&](std::string_view bytes) {
    written += bytes.size();
    return sink(bytes);
  };
  const std::string stopped = fmt::format("failed to send {}: the client went away", name);
  std::vector<char> buf(kPiece);
  for (const auto& file : files) {
    const std::string path = dir + "/" + file;
    // O_NOFOLLOW: a file swapped for a link after the listing is not followed.
    int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return make_error(fmt::format("failed to open {}: {}", path, errno_text(errno)));
    struct stat st {};
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      close(fd);
      return make_error(fmt::format("failed to archive {}: not a regular file", path));
    }
    auto header =
        file_header(name, file, static_cast<uint64_t>(st.st_size), static_cast<uint64_t>(st.st_mtime));
    if (!header) {
      close(fd);
      return make_error(header.error());
    }
    if (!emit({header->data(), kBlock})) {
      close(fd);
      return make_error(stopped);
    }
    // Exactly the size the header announced, whatever the file does meanwhile.
    uint64_t left = static_cast<uint64_t>(st.st_size);
    while (left > 0) {
      const size_t want = std::min<uint64_t>(left, buf.size());
      ssize_t n = read(fd, buf.data(), want);
      if (n <= 0) {  // it shrank: zeros, so the archive stays well formed
        std::fill(buf.begin(), buf.begin() + static_cast<ptrdiff_t>(want), 0);
        n = static_cast<ssize_t>(want);
      }
      left -= static_cast<uint64_t>(n);
      if (!emit({buf.data(), static_cast<size_t>(n)})) {
        close(fd);
        return make_error(stopped);
      }
    }
    close(fd);
    static const std::array<char, kBlock> zeros{};
    if (size_t pad = (kBlock - static_cast<size_t>(st.st_size) % kBlock) % kBlock;
        pad && !emit({zeros.data(), pad}))
      return make_error(stopped);
  }
  static const std::array<char, 2 * kBlock> end{};
  if (!emit({end.data(), end.size()})) return make_error(stopped);
  return written;
}

Result<UnpackedBundle> read_bundle_tar(std::string_view tar) {
  UnpackedBundle out;
  size_t total = 0;
  for (size_t pos = 0;;) {
    if (tar.size() - pos < kBlock) return make_error("failed to read the bundle archive: it is cut short");
    std::string_view block = tar.substr(pos, kBlock);
    pos += kBlock;
    if (std::all_of(block.begin(), block.end(), [](char c) { return c == '\0'; })) break;
    Header h{};
    std::memcpy(h.data(), block.data(), kBlock);
    auto sum = parse_octal(block.substr(148, 8));
    if (!sum || *sum != checksum(h))
      return make_error("failed to read the bundle archive: a header's checksum is wrong");
    if (block[156] != '0' && block[156] != '\0')
      return make_error("failed to read the bundle archive: an entry is not a regular file");
    auto size = parse_octal(block.substr(124, 12));
    if (!size) return make_error("failed to read the bundle archive: a header's size is not a number");
    std::string path = c_field(block, 0, 100);
    if (std::string prefix = c_field(block, 345, 155); !prefix.empty()) path = prefix + "/" + path;
    const auto slash = path.find('/');
    const std::string dir = path.substr(0, slash);
    const std::string file = slash == std::string::npos ? "" : path.substr(slash + 1);
    if (!plain_bundle_name(dir) || !plain_bundle_name(file))
      return make_error(fmt::format("failed to read the bundle archive: entry '{}' is not NAME/FILE",
                                    terminal_escape(path)));
    if (out.name.empty()) out.name = dir;
    if (dir != out.name)
      return make_error("failed to read the bundle archive: it holds more than one bundle");
    if (out.files.size() >= kMaxFiles || *size > kMaxTotalBytes - total)
      return make_error("failed to read the bundle archive: it is larger than a bundle can be");
    if (tar.size() - pos < *size) return make_error("failed to read the bundle archive: it is cut short");
    out.files[file] = std::string(tar.substr(pos, *size));
    total += *size;
    pos += (*size + kBlock - 1) / kBlock * kBlock;
    if (pos > tar.size()) return make_error("failed to read the bundle archive: it is cut short");
  }
  if (out.name.empty()) return make_error("failed to read the bundle archive: it is empty");
  return out;
}

}  // namespace hangtrace

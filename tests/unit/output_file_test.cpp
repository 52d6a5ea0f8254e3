// hangtrace/output_file.h: outputs are whole or absent, devices and FIFOs are
// written in place, and nothing another user planted is followed.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "hangtrace/output_file.h"
#include "temp_dir.h"

namespace hangtrace {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct stat lstat_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(lstat(path.c_str(), &st), 0) << path;
  return st;
}

// Names in the directory besides the ones a test made: leftovers of a writer.
std::vector<std::string> entries(const TempDir& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir.path)) out.push_back(e.path().filename());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(OutputFile, NewFileIsCreatedWhole) {
  TempDir dir;
  std::string path = dir.file("report.json");
  ASSERT_TRUE(write_file_atomically(path, "{}\n"));
  EXPECT_EQ(slurp(path), "{}\n");
  EXPECT_TRUE(S_ISREG(lstat_of(path).st_mode));
  EXPECT_EQ(entries(dir), std::vector<std::string>{"report.json"});
}

TEST(OutputFile, ExistingFileIsReplacedAndKeepsItsMode) {
  TempDir dir;
  std::string path = dir.file("out.txt");
  std::ofstream(path) << "old content that is longer than the new one";
  ASSERT_EQ(chmod(path.c_str(), 0600), 0);
  ino_t before = lstat_of(path).st_ino;
  ASSERT_TRUE(write_file_atomically(path, "new"));
  EXPECT_EQ(slurp(path), "new");
  struct stat st = lstat_of(path);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_NE(st.st_ino, before) << "replaced by rename, not rewritten in place";
  EXPECT_EQ(entries(dir), std::vector<std::string>{"out.txt"});
}

// The hole this layer closes: the temporary name was PATH.tmp.<pid>, opened
// without O_EXCL, so a link planted there by another user was followed by root.
TEST(OutputFile, ALinkPlantedAtTheOldTemporaryNameIsNeverFollowed) {
  TempDir dir;
  std::string victim = dir.file("victim");
  std::ofstream(victim) << "precious";
  std::string path = dir.file("report.json");
  std::string planted = path + ".tmp." + std::to_string(getpid());
  ASSERT_EQ(symlink(victim.c_str(), planted.c_str()), 0);
  ASSERT_TRUE(write_file_atomically(path, "report"));
  EXPECT_EQ(slurp(victim), "precious");
  EXPECT_EQ(slurp(path), "report");
  EXPECT_TRUE(S_ISLNK(lstat_of(planted).st_mode));
}

TEST(OutputFile, AFifoIsWrittenInPlace) {
  TempDir dir;
  std::string path = dir.file("pipe");
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
  std::string got;
  std::thread reader([&] { got = slurp(path); });
  auto r = write_file_atomically(path, "through the fifo");
  reader.join();
  ASSERT_TRUE(r) << r.error();
  EXPECT_EQ(got, "through the fifo");
  EXPECT_TRUE(S_ISFIFO(lstat_of(path).st_mode));
  EXPECT_EQ(entries(dir), std::vector<std::string>{"pipe"});
}

// Tried 2026-12-01: `hangtrace ... --json /dev/null` as root replaced the
// host's /dev/null with a regular file. A private copy of the device (and a
// link to it, as /dev/stdout is one) stands in for it here.
TEST(OutputFile, ACharacterDeviceIsWrittenInPlaceNeverReplaced) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to create a device node (mknod)";
  TempDir dir;
  std::string null_copy = dir.file("null");
  ASSERT_EQ(mknod(null_copy.c_str(), S_IFCHR | 0666, makedev(1, 3)), 0) << std::strerror(errno);
  std::string link = dir.file("stdout-like");
  ASSERT_EQ(symlink(null_copy.c_str(), link.c_str()), 0);
  for (const std::string& path : {null_copy, link}) {
    auto r = write_file_atomically(path, "discarded");
    ASSERT_TRUE(r) << path << ": " << r.error();
  }
  struct stat st = lstat_of(null_copy);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  EXPECT_EQ(st.st_rdev, makedev(1, 3));
  EXPECT_TRUE(S_ISLNK(lstat_of(link).st_mode));
  EXPECT_EQ(entries(dir), (std::vector<std::string>{"null", "stdout-like"}));
}

TEST(OutputFile, ALinkAnotherUserOwnsIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give a link to another user (lchown)";
  TempDir dir;
  std::string victim = dir.file("victim");
  std::ofstream(victim) << "precious";
  std::string link = dir.file("report.json");
  ASSERT_EQ(symlink(victim.c_str(), link.c_str()), 0);
  ASSERT_EQ(lchown(link.c_str(), 65534, 65534), 0);
  auto r = write_file_atomically(link, "report");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().find("failed to write " + link), std::string::npos) << r.error();
  EXPECT_NE(r.error().find("not followed"), std::string::npos) << r.error();
  EXPECT_EQ(r.error().find('\n'), std::string::npos) << "one line";
  EXPECT_EQ(slurp(victim), "precious");
  EXPECT_EQ(entries(dir), (std::vector<std::string>{"report.json", "victim"}));
}

TEST(OutputFile, ALinkAnotherUserOwnsInADirectoryAboveIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give a link to another user (lchown)";
  TempDir dir;
  fs::create_directory(dir.path / "elsewhere");
  std::string victim = dir.file("elsewhere/report.json");
  std::ofstream(victim) << "precious";
  // A shared "out" directory whose "job" entry another user made a link.
  fs::create_directory(dir.path / "out");
  std::string link = dir.file("out/job");
  ASSERT_EQ(symlink(dir.file("elsewhere").c_str(), link.c_str()), 0);
  ASSERT_EQ(lchown(link.c_str(), 65534, 65534), 0);
  auto r = write_file_atomically(link + "/report.json", "report");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().find(link + " is a symbolic link owned by uid 65534"), std::string::npos) << r.error();
  EXPECT_EQ(r.error().find('\n'), std::string::npos) << "one line";
  EXPECT_EQ(slurp(victim), "precious");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path / "elsewhere"), fs::directory_iterator()), 1);
  // The same link owned by root is the administrator's own: followed.
  ASSERT_EQ(lchown(link.c_str(), 0, 0), 0);
  ASSERT_TRUE(write_file_atomically(link + "/report.json", "report"));
  EXPECT_EQ(slurp(victim), "report");
}

TEST(OutputFile, AnOwnLinkToAFileReplacesTheFileAndKeepsTheLink) {
  TempDir dir;
  std::string target = dir.file("target");
  std::ofstream(target) << "old";
  std::string link = dir.file("latest.json");
  ASSERT_EQ(symlink("target", link.c_str()), 0);
  ASSERT_TRUE(write_file_atomically(link, "new"));
  EXPECT_TRUE(S_ISLNK(lstat_of(link).st_mode));
  EXPECT_EQ(slurp(target), "new");
}

TEST(OutputFile, FailuresAreOneLineAndLeaveNothing) {
  TempDir dir;
  auto r = write_file_atomically(dir.file("missing-dir/report.json"), "x");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().rfind("failed to write ", 0), 0u) << r.error();
  auto d = write_file_atomically(dir.path.string(), "x");
  ASSERT_FALSE(d);
  EXPECT_NE(d.error().find("Is a directory"), std::string::npos) << d.error();
  EXPECT_TRUE(entries(dir).empty());
}

TEST(OutputFile, NewFileRefusesWhatExistsAndLinks) {
  TempDir dir;
  std::string path = dir.file("meta.json");
  ASSERT_TRUE(write_new_file(path, "1"));
  EXPECT_FALSE(write_new_file(path, "2"));
  EXPECT_EQ(slurp(path), "1");
  std::string victim = dir.file("victim");
  std::ofstream(victim) << "precious";
  std::string link = dir.file("link");
  ASSERT_EQ(symlink(victim.c_str(), link.c_str()), 0);
  EXPECT_FALSE(write_new_file(link, "x"));
  EXPECT_EQ(slurp(victim), "precious");
}

}  // namespace
}  // namespace hangtrace

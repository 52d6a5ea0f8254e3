// A bundle as one archive (bundle_archive.h): what the daemon serves at
// /bundles/NAME reads back byte for byte, with our reader and with tar;
// the index lists only finished bundles of our own, with their job ids.
#include "hangtrace/bundle_archive.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "temp_dir.h"

namespace hangtrace {
namespace {

namespace fs = std::filesystem;

using testing::TempDir;

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A bundle directory as write_bundle leaves one: meta.json and a few files,
// one larger than a 64 KiB piece and not a multiple of 512 bytes.
fs::path make_bundle(const fs::path& parent, const std::string& name, double created,
                     const std::string& job) {
  BundleMeta m;
  m.trigger = "hang";
  m.cause = "collective-wait";
  m.hostname = "node-7";
  m.job_pid = 4242;
  m.rank = 3;
  m.world_size = 8;
  m.job_id = job;
  m.job_id_source = "torchelastic";
  m.created_unix = created;
  fs::path dir = parent / name;
  fs::create_directories(dir);
  std::ofstream(dir / "meta.json") << bundle_meta_to_json(m).dump(2);
  std::ofstream(dir / "report.txt") << "VERDICT: HANG\n";
  std::string big(200'001, 'x');
  for (size_t i = 0; i < big.size(); i += 7) big[i] = static_cast<char>('a' + i % 26);
  std::ofstream(dir / "snapshot.json", std::ios::binary) << big;
  return dir;
}

TEST(BundleArchive, ATarOfABundleReadsBackByteForByteWithOursAndWithTar) {
  TempDir dir;
  fs::path bundle = make_bundle(dir.path, "20270115T080000Z-node-7-4242-hang", 1000, "llama-run-1");
  std::string tar;
  size_t pieces = 0, largest = 0;
  auto written = write_bundle_tar(bundle, "20270115T080000Z-node-7-4242-hang", [&](std::string_view piece) {
    tar.append(piece);
    ++pieces;
    largest = std::max(largest, piece.size());
    return true;
  });
  ASSERT_TRUE(written) << written.error();
  EXPECT_EQ(*written, tar.size());
  EXPECT_EQ(tar.size() % 512, 0u);
  EXPECT_LE(largest, 64u * 1024);  // streamed in pieces, never the whole file at once
  EXPECT_GT(pieces, 4u);

  auto back = read_bundle_tar(tar);
  ASSERT_TRUE(back) << back.error();
  EXPECT_EQ(back->name, "20270115T080000Z-node-7-4242-hang");
  ASSERT_EQ(back->files.size(), 3u);
  for (const auto& [file, bytes] : back->files) EXPECT_EQ(bytes, read_file(bundle / file)) << file;

  // GNU tar reads it as well (what an engineer does with a curl'd bundle).
  fs::path out = dir.path / "untarred";
  fs::create_directories(out);
  std::ofstream(dir.path / "b.tar", std::ios::binary) << tar;
  std::string cmd = "tar -xf '" + (dir.path / "b.tar").string() + "' -C '" + out.string() + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  for (const auto& [file, bytes] : back->files) EXPECT_EQ(read_file(out / back->name / file), bytes) << file;

  // And ours reads what tar writes (ustar, the files named one by one).
  const std::string name = back->name;
  std::string make = "tar -cf '" + (dir.path / "by-tar.tar").string() + "' --format=ustar -C '" +
                     dir.path.string() + "' " + name + "/meta.json " + name + "/snapshot.json";
  ASSERT_EQ(std::system(make.c_str()), 0) << make;
  auto theirs = read_bundle_tar(read_file(dir.path / "by-tar.tar"));
  ASSERT_TRUE(theirs) << theirs.error();
  EXPECT_EQ(theirs->name, name);
  ASSERT_EQ(theirs->files.size(), 2u);
  EXPECT_EQ(theirs->files["snapshot.json"], read_file(bundle / "snapshot.json"));
}

TEST(BundleArchive, ALinkInTheBundleIsNotArchivedAndAClientGoneStopsIt) {
  TempDir dir;
  fs::path bundle = make_bundle(dir.path, "b1", 1000, "job");
  std::ofstream(dir.path / "secret") << "root only";
  fs::create_symlink(dir.path / "secret", bundle / "link.json");
  std::string tar;
  ASSERT_TRUE(write_bundle_tar(bundle, "b1", [&](std::string_view p) {
    tar.append(p);
    return true;
  }));
  auto back = read_bundle_tar(tar);
  ASSERT_TRUE(back) << back.error();
  EXPECT_FALSE(back->files.count("link.json"));
  EXPECT_EQ(tar.find("root only"), std::string::npos);
  size_t calls = 0;
  auto stopped = write_bundle_tar(bundle, "b1", [&](std::string_view) { return ++calls < 2; });
  EXPECT_FALSE(stopped);
  EXPECT_EQ(calls, 2u);
  EXPECT_NE(stopped.error().find("went away"), std::string::npos) << stopped.error();
}

TEST(BundleArchive, AnArchiveThatLiesIsOneClearError) {
  TempDir dir;
  fs::path bundle = make_bundle(dir.path, "b1", 1000, "job");
  std::string tar;
  ASSERT_TRUE(write_bundle_tar(bundle, "b1", [&](std::string_view p) {
    tar.append(p);
    return true;
  }));
  EXPECT_FALSE(read_bundle_tar(""));
  EXPECT_FALSE(read_bundle_tar(std::string(1024, '\0')));               // nothing in it
  EXPECT_FALSE(read_bundle_tar(std::string_view(tar).substr(0, 700)));  // cut short
  std::string bad = tar;
  bad[0] = 'X';  // the name changes, the checksum does not
  auto wrong = read_bundle_tar(bad);
  ASSERT_FALSE(wrong);
  EXPECT_NE(wrong.error().find("checksum"), std::string::npos) << wrong.error();
  // A path out of the bundle's directory, with a checksum that matches.
  std::string escape = tar;
  std::string name = "b1/../../etc/passwd";
  std::fill(escape.begin(), escape.begin() + 100, '\0');
  std::copy(name.begin(), name.end(), escape.begin());
  uint64_t sum = 0;
  for (size_t i = 0; i < 512; ++i) sum += (i >= 148 && i < 156) ? ' ' : static_cast<unsigned char>(escape[i]);
  char field[8];
  std::snprintf(field, sizeof field, "%06llo", static_cast<unsigned long long>(sum));
  std::copy(field, field + 6, escape.begin() + 148);
  escape[154] = '\0';
  auto out = read_bundle_tar(escape);
  ASSERT_FALSE(out);
  EXPECT_NE(out.error().find("not NAME/FILE"), std::string::npos) << out.error();
}

TEST(BundleArchive, TheIndexListsOurFinishedBundlesNewestFirstWithTheirJob) {
  TempDir dir;
  make_bundle(dir.path, "b-old", 1000, "job-a");
  make_bundle(dir.path, "b-new", 2000, "job-b");
  fs::create_directories(dir.path / ".incomplete-b-3.XXXX");
  fs::path elsewhere = dir.path.parent_path() / (dir.path.filename().string() + "-elsewhere");
  make_bundle(elsewhere, "planted", 3000, "job-c");
  fs::create_directory_symlink(elsewhere / "planted", dir.path / "planted");
  auto list = list_bundles(dir.path);
  ASSERT_TRUE(list) << list.error();
  nlohmann::json index = bundle_index_json(*list, "node-7", 1.8e9);
  EXPECT_EQ(index["schema"], kBundleIndexSchema);
  EXPECT_EQ(index["hostname"], "node-7");
  ASSERT_EQ(index["bundles"].size(), 2u) << index.dump(1);
  EXPECT_EQ(index["bundles"][0]["name"], "b-new");
  EXPECT_EQ(index["bundles"][0]["job_id"], "job-b");
  EXPECT_EQ(index["bundles"][0]["rank"], 3);
  EXPECT_GT(index["bundles"][0]["bytes"].get<uint64_t>(), 200'000u);
  EXPECT_EQ(index["bundles"][1]["name"], "b-old");
  fs::remove_all(elsewhere);
  EXPECT_TRUE(plain_bundle_name("20270115T080000Z-node-7-4242-hang.2"));
  for (const char* bad : {"", ".", "..", ".incomplete-x", "a/b", "a b", "a\nb", "x%2F"})
    EXPECT_FALSE(plain_bundle_name(bad)) << bad;
}

}  // namespace
}  // namespace hangtrace

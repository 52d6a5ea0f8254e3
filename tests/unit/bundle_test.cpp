// Postmortem bundles: every file written, read back equal, written whole or
// not at all, pruned to the retention limit without touching foreign dirs.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "hangtrace/bundle.h"
#include "temp_dir.h"

namespace hangtrace {
namespace {

namespace fs = std::filesystem;

using testing::TempDir;

// A rank-1 job whose main thread has waited 30 s in a futex under all_reduce.
Snapshot rank_snapshot() {
  Snapshot s;
  s.hangtrace_version = "test";
  s.hostname = "node-7";
  s.target_pid = 4242;
  s.taken_at_unix = 1'800'000'000;
  ProcessInfo p;
  p.pid = 4242;
  p.comm = "python3";
  p.cmdline = "python3 train.py";
  p.rank = 1;
  p.world_size = 2;
  p.local_rank = 1;
  p.job_id = "llama-run-1";
  p.job_id_source = "torchelastic";
  ThreadInfo t;
  t.tid = 4242;
  t.comm = "python3";
  t.state = 'S';
  KernelTaskView k;
  k.off_cpu_ns = 30'000'000'000ull;
  k.stack = {{0xffffffff81000100ull, "futex_wait_queue+0x5f"}};
  t.kernel = k;
  t.syscall.mode = SyscallState::Mode::InSyscall;
  t.syscall.nr = HT_NR_futex;
  t.syscall.args[1] = FUTEX_WAIT;
  t.python_stack = {
      {UserFrame::Kind::Python, "all_reduce", "torch/distributed/distributed_c10d.py", 1536, 0}};
  p.threads.push_back(t);
  s.processes.push_back(p);
  return s;
}

BundleContent content_for(const Snapshot& s, const std::string& trigger) {
  Diagnosis d = diagnose(s);
  BundleMeta meta = bundle_meta_for(s, d, trigger);
  return render_bundle(s, d, nullptr, meta, {{"events", nlohmann::json::array({{{"type", "oom"}}})}});
}

TEST(Bundle, NamesFromTheJobCannotLeaveTheParent) {
  // A host name and a trigger become path components: nothing in them can
  // name another directory, hide the bundle or end the line.
  BundleMeta m;
  m.created_unix = 1800000000;
  m.job_pid = 7;
  m.hostname = "../../etc/cron.d";
  m.trigger = "/..\n\x1b[2J\xff";
  std::string name = bundle_dir_name(m);
  EXPECT_EQ(name.find('/'), std::string::npos) << name;
  EXPECT_EQ(name.find('\n'), std::string::npos) << name;
  EXPECT_EQ(name.find('\x1b'), std::string::npos) << name;
  EXPECT_NE(name.front(), '.') << name;
  TempDir dir;
  Snapshot s = rank_snapshot();
  BundleContent c = content_for(s, "hang");
  auto path = write_bundle(dir.path, name, c);
  ASSERT_TRUE(path) << path.error();
  EXPECT_EQ(fs::path(*path).parent_path(), fs::path(dir.path));
}

TEST(Bundle, WritesEveryFileAndReadsBack) {
  TempDir dir;
  Snapshot s = rank_snapshot();
  BundleContent c = content_for(s, "hang");
  EXPECT_EQ(c.meta.rank, 1);
  EXPECT_EQ(c.meta.world_size, 2);
  EXPECT_EQ(c.meta.job_cmdline, "python3 train.py");
  EXPECT_EQ(c.meta.job_id, "llama-run-1");
  std::string name = bundle_dir_name(c.meta);
  EXPECT_EQ(name, "20270115T080000Z-node-7-4242-hang");
  auto path = write_bundle(dir.path, name, c);
  ASSERT_TRUE(path) << path.error();
  for (const auto& f : bundle_file_names()) {
    EXPECT_TRUE(fs::exists(fs::path(*path) / f)) << f;
    EXPECT_GT(fs::file_size(fs::path(*path) / f), 0u) << f;
  }
  auto b = read_bundle(*path);
  ASSERT_TRUE(b) << b.error();
  EXPECT_EQ(b->meta.trigger, "hang");
  EXPECT_EQ(b->meta.rank, 1);
  EXPECT_EQ(b->snapshot.target_pid, 4242);
  ASSERT_EQ(b->snapshot.processes.size(), 1u);
  EXPECT_EQ(b->snapshot.processes[0].rank, 1);
  EXPECT_EQ(b->meta.job_id, "llama-run-1");
  EXPECT_EQ(b->meta.job_id_source, "torchelastic");
  EXPECT_EQ(b->snapshot.processes[0].job_id, "llama-run-1");
  EXPECT_EQ(b->report["target_pid"], 4242);
  EXPECT_EQ(b->recorder["events"][0]["type"], "oom");
  // Only the bundle itself: no temporary directory left beside it.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()), 1);
}

TEST(Bundle, ALiveWindowsStallProfileAddsTheWallTimeFlameGraph) {
  TempDir dir;
  Snapshot s = rank_snapshot();
  Diagnosis d = diagnose(s);
  ThreadProfile main;
  main.pid = main.tid = 4242;
  main.comm = "python3";
  main.window_ns = 5'000'000'000ull;
  main.causes = {{StallCause::Collective, main.window_ns, 1.0, {}, {}}};
  d.profile.window_ns = main.window_ns;
  d.profile.mains.push_back(main);
  BundleContent c = render_bundle(s, d, nullptr, bundle_meta_for(s, d, "manual"), {});
  EXPECT_EQ(c.files["wall.folded"], "python3/4242;collective 5000000\n");
  auto path = write_bundle(dir.path, "x", c);
  ASSERT_TRUE(path) << path.error();
  for (const auto& f : optional_bundle_file_names()) EXPECT_GT(fs::file_size(fs::path(*path) / f), 0u) << f;
  std::ifstream svg(fs::path(*path) / "wall-flamegraph.svg");
  std::string text((std::istreambuf_iterator<char>(svg)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("wall time by cause"), std::string::npos);
  // Without one (a snapshot alone), the bundle has none of them.
  BundleContent plain = content_for(s, "hang");
  for (const auto& f : optional_bundle_file_names()) EXPECT_EQ(plain.files.count(f), 0u) << f;
}

TEST(Bundle, DirectoriesAreForRootOnlyWhateverTheUmask) {
  TempDir dir;
  mode_t old = umask(0);
  auto path = write_bundle((dir.path / "bundles").string(), "x", content_for(rank_snapshot(), "hang"));
  umask(old);
  ASSERT_TRUE(path) << path.error();
  struct stat st {};
  ASSERT_EQ(stat((dir.path / "bundles").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u) << "the parent hangtrace created";
  ASSERT_EQ(stat(path->c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u) << "the bundle";
}

TEST(Bundle, AParentThroughAnotherUsersLinkIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give a link to another user (lchown)";
  TempDir dir;
  fs::create_directory(dir.path / "elsewhere");
  fs::path link = dir.path / "bundles";
  ASSERT_EQ(symlink((dir.path / "elsewhere").c_str(), link.c_str()), 0);
  ASSERT_EQ(lchown(link.c_str(), 65534, 65534), 0);
  auto r = write_bundle(link.string(), "x", content_for(rank_snapshot(), "hang"));
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().find("is a symbolic link owned by uid 65534"), std::string::npos) << r.error();
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path / "elsewhere"), fs::directory_iterator()), 0);
}

TEST(Bundle, SameNameTwiceGetsACounter) {
  TempDir dir;
  BundleContent c = content_for(rank_snapshot(), "hang");
  auto a = write_bundle(dir.path, "x", c);
  auto b = write_bundle(dir.path, "x", c);
  ASSERT_TRUE(a && b);
  EXPECT_NE(*a, *b);
  EXPECT_EQ(fs::path(*b).filename(), "x.2");
}

TEST(Bundle, AnIncompleteContentLeavesNothing) {
  TempDir dir;
  BundleContent c = content_for(rank_snapshot(), "hang");
  c.files.erase("trace.json");
  auto r = write_bundle(dir.path, "x", c);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().find("trace.json is missing"), std::string::npos) << r.error();
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()), 0);
}

TEST(Bundle, PruneKeepsTheNewestAndLeavesForeignDirectories) {
  TempDir dir;
  Snapshot s = rank_snapshot();
  std::vector<std::string> paths;
  for (int i = 0; i < 5; ++i) {
    BundleContent c = content_for(s, "hang");
    c.meta.created_unix = 1000 + i;
    c.files["meta.json"] = bundle_meta_to_json(c.meta).dump();
    paths.push_back(*write_bundle(dir.path, "b" + std::to_string(i), c));
  }
  fs::create_directory(dir.path / "not-a-bundle");
  // Planted by another user: an old bundle's copy in a directory they own,
  // and a link to a real bundle elsewhere. Neither is deleted or followed.
  fs::path foreign = dir.path / "foreign";
  bool root = geteuid() == 0;  // chown to another user needs root
  if (root) {
    fs::copy(paths[0], foreign);
    ASSERT_EQ(chown(foreign.c_str(), 65534, 65534), 0);
  }
  fs::path elsewhere = dir.path.parent_path() / (dir.path.filename().string() + "-elsewhere");
  fs::copy(paths[1], elsewhere);
  fs::create_directory_symlink(elsewhere, dir.path / "link");
  auto removed = prune_bundles(dir.path, 2);
  ASSERT_TRUE(removed) << removed.error();
  EXPECT_EQ(*removed, 3u);
  EXPECT_TRUE(fs::exists(paths[4]));
  EXPECT_TRUE(fs::exists(paths[3]));
  EXPECT_FALSE(fs::exists(paths[2]));
  EXPECT_FALSE(fs::exists(paths[0]));
  EXPECT_TRUE(fs::exists(dir.path / "not-a-bundle"));
  EXPECT_TRUE(fs::is_symlink(dir.path / "link"));
  EXPECT_TRUE(fs::exists(elsewhere / "meta.json"));
  if (root) {
    EXPECT_TRUE(fs::exists(foreign / "meta.json"));
  }
  fs::remove_all(elsewhere);
}

TEST(Bundle, CorruptFilesAreOneClearError) {
  TempDir dir;
  auto path = write_bundle(dir.path, "x", content_for(rank_snapshot(), "hang"));
  ASSERT_TRUE(path);
  std::ofstream(fs::path(*path) / "snapshot.json") << "{\"schema\": 1, \"processes\": [tru";
  auto b = read_bundle(*path);
  ASSERT_FALSE(b);
  EXPECT_EQ(b.error(), "failed to read bundle " + *path + ": snapshot.json: not valid JSON");
  fs::remove(fs::path(*path) / "meta.json");
  b = read_bundle(*path);
  ASSERT_FALSE(b);
  EXPECT_NE(b.error().find("meta.json: No such file"), std::string::npos) << b.error();
}

// An archive's or a download's files read as a directory's are, with the
// host clock the bundle recorded; what is missing is named.
TEST(Bundle, ReadsBackFromFilesInMemoryWithItsHostClock) {
  BundleContent c = content_for(rank_snapshot(), "hang");
  c.meta.clock = HostClock{1.8e9, true, 0.25, 0.01};
  c.files["meta.json"] = bundle_meta_to_json(c.meta).dump();
  auto b = read_bundle_files("http://node-7:9400/bundles/x", c.files);
  ASSERT_TRUE(b) << b.error();
  EXPECT_EQ(b->path, "http://node-7:9400/bundles/x");
  EXPECT_EQ(b->meta.rank, 1);
  EXPECT_EQ(b->snapshot.target_pid, 4242);
  EXPECT_TRUE(b->meta.clock.synchronized);
  EXPECT_EQ(b->meta.clock.max_error_s, 0.25);
  EXPECT_EQ(b->meta.clock.sampled_unix, 1.8e9);
  c.files.erase("recorder.json");
  b = read_bundle_files("x.tar", c.files);
  ASSERT_FALSE(b);
  EXPECT_EQ(b.error(), "failed to read bundle x.tar: recorder.json: not in the bundle");
  // Another host's clock bounds: a negative bound or a word is none.
  auto m = bundle_meta_from_json(nlohmann::json::parse(
      R"({"schema": "hangtrace-bundle/1", "clock": {"sampled_unix": 1.8e9, "synchronized": "yes",
          "max_error_s": -1, "est_error_s": "x"}})"));
  ASSERT_TRUE(m) << m.error();
  EXPECT_FALSE(m->clock.synchronized);
  EXPECT_FALSE(m->clock.max_error_s);
  EXPECT_FALSE(m->clock.est_error_s);
}

// A meta.json from another host: numbers past their fields are no values
// (1e30 into an int was undefined behaviour: UBSan in the sanitized suite).
TEST(Bundle, NumbersPastTheirFieldsInMetaAreNoValues) {
  auto m = bundle_meta_from_json(nlohmann::json::parse(
      R"({"schema": "hangtrace-bundle/1", "job_pid": 1e30, "job_start_ticks": -5.5, "rank": 99999999999,
          "world_size": 8, "created_unix": 1e300, "trigger": "hang"})"));
  ASSERT_TRUE(m) << m.error();
  EXPECT_EQ(m->job_pid, 0);
  EXPECT_EQ(m->job_start_ticks, 0u);
  EXPECT_FALSE(m->rank);
  EXPECT_EQ(m->world_size, 8);
  EXPECT_EQ(m->created_unix, 1e300);
  EXPECT_EQ(m->trigger, "hang");
}

}  // namespace
}  // namespace hangtrace

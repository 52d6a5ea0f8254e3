// The registry of finding kinds (finding_kinds.h): every kind once, with a
// name and a doc line, and the README and the JSON schema naming exactly the
// kinds it holds, so the docs cannot drift from the code.
#include "hangtrace/finding_kinds.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace hangtrace {
namespace {

std::string read_source_file(const std::string& relative) {
  std::ifstream in(std::string(HANGTRACE_SOURCE_DIR) + "/" + relative);
  EXPECT_TRUE(in) << "cannot read " << relative;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The `quoted` words of `text`, in order.
std::vector<std::string> backticked(const std::string& text) {
  std::vector<std::string> out;
  for (size_t open = text.find('`'); open != std::string::npos; open = text.find('`', open + 1)) {
    size_t close = text.find('`', open + 1);
    if (close == std::string::npos) break;
    out.push_back(text.substr(open + 1, close - open - 1));
    open = close;
  }
  return out;
}

std::vector<std::string> registry_names() {
  std::vector<std::string> out;
  for (const auto& k : kFindingKinds) out.push_back(k.name);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> sorted(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  return v;
}

TEST(FindingKinds, EachKindOnceWithItsNameAndDocLine) {
  std::set<std::string> names;
  for (size_t i = 0; i < std::size(kFindingKinds); ++i) {
    const FindingKindInfo& k = kFindingKinds[i];
    EXPECT_EQ(static_cast<size_t>(k.kind), i) << k.name << ": the table is indexed by the enum";
    EXPECT_TRUE(names.insert(k.name).second) << "two kinds are named " << k.name;
    EXPECT_FALSE(std::string(k.name).empty());
    EXPECT_EQ(std::string(k.name).find_first_not_of("abcdefghijklmnopqrstuvwxyz-"), std::string::npos)
        << k.name;
    EXPECT_FALSE(std::string(k.doc).empty()) << k.name << " has no doc line";
    EXPECT_STREQ(finding_kind_name(k.kind), k.name);
    EXPECT_EQ(finding_kind_from_name(k.name), k.kind);
  }
  EXPECT_EQ(names.size(), 27u);
  EXPECT_FALSE(finding_kind_from_name("no-such-kind"));
}

TEST(FindingKinds, ReadmeNamesExactlyTheRegistrysKinds) {
  std::string readme = read_source_file("README.md");
  const std::string intro = "Finding kinds today:";
  size_t at = readme.find(intro);
  ASSERT_NE(at, std::string::npos) << "README.md has no \"" << intro << "\" sentence";
  size_t end = readme.find("\n\n", at);
  EXPECT_EQ(sorted(backticked(readme.substr(at, end - at))), registry_names());
}

TEST(FindingKinds, JsonSchemaDocumentsExactlyTheRegistrysKinds) {
  std::string schema = read_source_file("docs/json-schema.md");
  const std::string heading = "### Kinds and their `details`";
  size_t at = schema.find(heading);
  ASSERT_NE(at, std::string::npos) << "docs/json-schema.md has no \"" << heading << "\" section";
  size_t end = schema.find("\n#", at + heading.size());
  std::istringstream section(schema.substr(at + heading.size(), end - at - heading.size()));
  std::vector<std::string> documented;
  for (std::string line; std::getline(section, line);)
    if (line.rfind("| `", 0) == 0)
      documented.push_back(backticked(line).front());  // a row: | `kind` | when | ...
  EXPECT_EQ(sorted(documented), registry_names());
}

}  // namespace
}  // namespace hangtrace

// README.md is the front door: its example is demos/quickstart.cpp as built (after the file's
// header comment), so the code a reader copies is code the build compiles, and the README stays
// short (at most 150 lines, the rest under docs/, whose files it links).
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

namespace fs = std::filesystem;

namespace {

const fs::path kRoot = fs::path(KILN_TEST_FIXTURES).parent_path().parent_path();

std::string read(const fs::path& path) {
  std::ifstream in(path);
  BOOST_TEST_REQUIRE(in.good(), "cannot read " << path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_example_is_the_quickstart_demo_as_built) {
  std::string readme = read(kRoot / "README.md");
  std::string demo = read(kRoot / "demos" / "quickstart.cpp");
  // The demo without its leading comment lines.
  std::size_t body = 0;
  while (demo.compare(body, 2, "//") == 0) body = demo.find('\n', body) + 1;
  std::string code = demo.substr(body);
  std::size_t open = readme.find("```cpp\n");
  BOOST_TEST_REQUIRE(open != std::string::npos, "README has no C++ example");
  open += 7;
  std::size_t close = readme.find("```", open);
  BOOST_TEST(readme.substr(open, close - open) == code);
}

BOOST_AUTO_TEST_CASE(the_readme_is_short_and_its_links_resolve) {
  std::string readme = read(kRoot / "README.md");
  std::size_t lines = 0;
  for (char c : readme) lines += c == '\n';
  BOOST_TEST(lines <= 150u);
  std::regex link(R"(\]\(((docs|demos)/[^)#]+)(#[^)]*)?\))");
  int links = 0;
  for (auto it = std::sregex_iterator(readme.begin(), readme.end(), link);
       it != std::sregex_iterator(); ++it, ++links)
    BOOST_TEST(fs::exists(kRoot / (*it)[1].str()), "README links a missing " << (*it)[1].str());
  BOOST_TEST(links >= 5);
  BOOST_TEST(fs::exists(kRoot / "docs" / "architecture.md"));
}

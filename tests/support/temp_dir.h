// A fresh directory under /tmp for one test, removed (made writable first) when it ends.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>

namespace kiln::test {

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/kiln_test_XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::add, ec);
    for (auto& p : std::filesystem::recursive_directory_iterator(path_, ec))
      std::filesystem::permissions(p.path(), std::filesystem::perms::owner_all,
                                   std::filesystem::perm_options::add, ec);
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

}  // namespace kiln::test

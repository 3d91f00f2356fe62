// The report's index.html: every compiled function of the report directory with its launches
// per call, compile time and recompiles, and the totals. Built from the JSON summary each page
// carries, so that `kiln report DIR` can rebuild it from the pages alone.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace kiln::jit::report {

// The index page of these page summaries (function_page.h's JSON); `notes` are extra
// paragraphs (already HTML), such as the process's kernel profile.
std::string index_page(const std::vector<std::string>& summaries, const std::string& notes = {});

// Reads the summary of every *.html page in `dir` but index.html and writes index.html
// (atomically); returns how many pages it lists. A page without a summary is skipped with a
// line on stderr. Raises kiln::Error when `dir` is not a directory.
int rebuild_index(const std::filesystem::path& dir, const std::string& notes = {});

// Writes `text` to `path` by a temporary file in the same directory and a rename, so that a
// reader never sees half a page. Raises kiln::Error naming the path.
void write_atomically(const std::filesystem::path& path, const std::string& text);

}  // namespace kiln::jit::report

// HTML building blocks of the report: escaping, and the page shell every report page shares
// (inline CSS, a small script that makes graph groups expandable and highlights CUDA sources,
// and the page's JSON summary block). Nothing is loaded from the network.
#pragma once

#include <string>
#include <string_view>

namespace kiln::jit::report {

// Text for an element's content or a quoted attribute: & < > " ' escaped.
std::string escape(std::string_view text);
// JSON for inside <script type="application/json">: "</" cannot end the element early.
std::string script_json(std::string_view json);
// "1.5 MB", "312 B"
std::string format_bytes(std::int64_t bytes);

// A whole page: `summary_json` goes in <script type="application/json" id="kiln-summary">,
// which `kiln report` reads back to rebuild the index.
std::string page(std::string_view title, std::string_view body, std::string_view summary_json);

// The summary block of a page, or empty when it has none.
std::string summary_of(std::string_view page_html);

}  // namespace kiln::jit::report

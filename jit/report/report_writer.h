// KILN_REPORT=DIR: the HTML report written as the process runs. Each compiled entry adds to
// its function's page (written at once), and at exit every page is written again with the
// profile (KILN_PROFILE=1) and DIR/index.html rebuilt from the pages there.
#pragma once

#include <string>

#include "jit/report/report_collect.h"

namespace kiln::jit::report {

// The report directory from KILN_REPORT, or empty when there is no report.
std::string report_dir();

// Records a new entry of the compiled function `function` (its identity) called `name` and
// writes its page. Never raises: a report that cannot be written is one warning line.
void record_entry(const void* function, const std::string& name, const EntryParts& parts);

// Writes every page again with what the profiler measured and rebuilds each index: what the
// process does at exit (tests call it to look at the report before then).
void finish_report();

// Time this process spent recording entries (gathering, Graphviz, writing pages), in ms.
double recording_ms();

}  // namespace kiln::jit::report

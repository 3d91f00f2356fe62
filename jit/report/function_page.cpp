// A compiled function's report page (see function_page.h).
#include "jit/report/function_page.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>

#include "jit/report/graph_svg.h"
#include "jit/report/html.h"

namespace kiln::jit::report {

namespace {

// Larger group pictures are drawn when their section is opened.
constexpr std::size_t kGroupsDrawnAtLoad = 200;

std::string resource(long v) {
  return v < 0 ? std::string("<span class=\"muted\">n/a</span>") : std::to_string(v);
}

const ProfileFacts* profile_of(const Profiles& profiles, const ProgramFacts& p,
                               const StepFacts& s) {
  if (s.kernel >= 0) {
    auto it = profiles.find(p.kernels[s.kernel].name);
    return it == profiles.end() ? nullptr : &it->second;
  }
  if (s.kernel_prefix.empty()) return nullptr;
  const ProfileFacts* found = nullptr;
  for (auto it = profiles.lower_bound(s.kernel_prefix);
       it != profiles.end() && it->first.starts_with(s.kernel_prefix); ++it) {
    if (found) return nullptr;  // several: which one this step ran is not known here
    found = &it->second;
  }
  return found;
}

std::string entries_section(const FunctionFacts& f) {
  std::string out =
      "<section id=\"entries\"><h2>Entries</h2>\n<table><tr><th>entry</th><th>traced "
      "because</th><th>dynamic dims</th><th class=\"num\">compile</th><th "
      "class=\"num\">launches per call</th><th>runs as</th></tr>\n";
  for (const auto& e : f.entries) {
    std::string dims;
    for (const auto& d : e.dynamic_dims) dims += escape(d) + "<br>";
    out += fmt::format(
        "<tr><td><a href=\"#entry-{0}\">{0}</a></td><td class=\"reason recompile-reason\">{1}</td>"
        "<td>{2}</td><td class=\"num\">{3:.1f} ms</td><td "
        "class=\"num\">{4}</td><td>{5}</td></tr>\n",
        e.index, escape(e.reason), dims.empty() ? "<span class=\"muted\">none</span>" : dims,
        e.compile_ms, e.launches_per_call(), escape(e.runs_as));
  }
  return out + "</table></section>\n";
}

// The cut edges counted by reason, values and shapes left out: what keeps the launch count up.
std::string reasons_table(const GraphFacts& g) {
  static const std::regex value("%\\d+"), shape("\\[[^\\]]*\\]");
  std::map<std::string, int> counts;
  for (const auto& c : g.cuts)
    ++counts[std::regex_replace(std::regex_replace(c.reason, value, "%v"), shape, "[..]")];
  std::vector<std::pair<int, std::string>> order;
  for (const auto& [reason, n] : counts) order.push_back({n, reason});
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string out =
      "<table class=\"cut-reasons\"><tr><th class=\"num\">cut edges</th><th>why "
      "the fuser cut them</th></tr>\n";
  for (const auto& [n, reason] : order)
    out += fmt::format("<tr><td class=\"num\">{}</td><td class=\"reason\">{}</td></tr>\n", n,
                       escape(reason));
  return out + "</table>\n";
}

std::string graph_section(const GraphFacts& g) {
  std::string out = fmt::format(
      "<section class=\"graph\" id=\"{}-graph\"><h3>{} ({} nodes, {} groups, {} cut edges)</h3>\n",
      g.id, escape(g.title), g.nodes, g.groups.size(), g.cuts.size());
  out +=
      "<p class=\"legend muted\">Boxes are fusion groups, coloured by group: a 3-D box is a "
      "library call (cuBLASLt), an octagon attention, a red border a fallback, dashed a host "
      "view. An edge is a value the fuser did not fuse, labelled with its reason (hover for all "
      "reasons). Click a group to list its nodes.</p>\n";
  out += reasons_table(g);
  if (!g.groups_svg.empty() && g.groups.size() > kGroupsDrawnAtLoad) {
    // Drawn when opened: a page of a deep model opens without laying out thousands of boxes.
    out += fmt::format(
        "<details class=\"lazy-picture\" id=\"{}-picture\"><summary>the graph picture ({} "
        "groups; drawn when opened)</summary><template>{}</template><div "
        "class=\"picture\"></div></details>\n",
        g.id, g.groups.size(), g.groups_svg);
  } else if (!g.groups_svg.empty()) {
    out += "<div class=\"picture\">" + g.groups_svg + "</div>\n";
  } else {
    out += fmt::format("<p class=\"warn\">No picture: {}. The fusion as text:</p><pre>{}</pre>\n",
                       escape(g.svg_problem), escape(g.text));
  }
  for (std::size_t i = 0; i < g.groups.size(); ++i) {
    const GroupFacts& gr = g.groups[i];
    out += fmt::format(
        "<div class=\"group-detail\" id=\"detail-{}g{}\" style=\"border-color:{}\"><b>group {} "
        "{} {}</b> over {}<pre>",
        g.id, i, group_colour(static_cast<int>(i)), i, escape(gr.kind), escape(gr.name),
        escape(gr.domain));
    for (const auto& n : gr.nodes) out += escape(n) + "\n";
    out += "</pre></div>\n";
  }
  if (!g.nodes_svg.empty())
    out += "<details><summary>every node, clustered by group</summary><div class=\"picture\">" +
           g.nodes_svg + "</div></details>\n";
  out +=
      "<details class=\"cuts\"><summary>cut edges and why</summary><table><tr><th>value</th>"
      "<th>from group</th><th>to group</th><th>read by</th><th>reason</th></tr>\n";
  for (const auto& c : g.cuts)
    out += fmt::format(
        "<tr class=\"cut\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"reason\">{}"
        "</td></tr>\n",
        escape(c.value), c.producer, c.consumer, escape(c.consumer_op), escape(c.reason));
  return out + "</table></details></section>\n";
}

std::string partition_section(const EntryFacts& e) {
  const PartitionFacts& p = e.partition;
  std::int64_t input_bytes = 0;
  for (const auto& s : p.saved) input_bytes += s.is_input ? s.bytes : 0;
  std::string out = fmt::format(
      "<section class=\"partition\" id=\"entry-{}-partition\"><h3>Forward / backward "
      "partition</h3>\n<p>The forward saves {} values for the backward: {} of activations "
      "(and {} of the call's inputs, kept rather than copied); the backward recomputes {} "
      "forward nodes.</p>\n<table><tr><th>saved value</th><th>type</th><th "
      "class=\"num\">bytes</th><th>why</th></tr>\n",
      e.index, p.saved.size(), format_bytes(p.activation_bytes), format_bytes(input_bytes),
      p.recomputed_count);
  for (const auto& s : p.saved)
    out += fmt::format(
        "<tr class=\"saved\"><td>{}</td><td><code>{}</code></td><td class=\"num\">{}</td><td>{}{}"
        "</td></tr>\n",
        escape(s.value), escape(s.type), s.bytes, s.is_input ? "(an input) " : "", escape(s.why));
  out += "</table>\n";
  if (!p.recomputed.empty()) {
    out += fmt::format(
        "<details class=\"recomputed\"><summary>{} backward nodes read no incoming gradient "
        "(recomputed from saved values)</summary><pre>",
        p.recomputed.size());
    for (const auto& n : p.recomputed) out += escape(n) + "\n";
    out += "</pre></details>\n";
  }
  for (const auto& [region, nodes] : p.checkpoint_regions) {
    out += fmt::format(
        "<details class=\"checkpoint\"><summary>checkpoint region {}: {} forward nodes, never "
        "saved but what leaves it</summary><pre>",
        region, nodes.size());
    for (const auto& n : nodes) out += escape(n) + "\n";
    out += "</pre></details>\n";
  }
  return out + "</section>\n";
}

// A bar as long as `value` is against `max`: the expensive steps stand out.
std::string bar(double value, double max) {
  double w = max > 0 ? 160.0 * value / max : 0;
  return fmt::format(
      "<svg class=\"bar\" width=\"162\" height=\"10\"><rect width=\"{:.1f}\" height=\"10\" "
      "fill=\"{}\"/></svg>",
      std::max(w, value > 0 ? 1.0 : 0.0), value >= 0.5 * max ? "#e65100" : "#5c8ee6");
}

std::string plan_section(const ProgramFacts& p, const Profiles& profiles, const std::string& id) {
  bool profiled = false;
  double max_cost = 0;
  for (const auto& s : p.steps) {
    const ProfileFacts* pf = profile_of(profiles, p, s);
    profiled = profiled || pf;
    max_cost = std::max(max_cost, pf ? pf->modeled_us : static_cast<double>(s.ideal_bytes));
  }
  std::map<std::string, int> kinds;
  for (const auto& s : p.steps)
    if (s.launches()) ++kinds[s.kind];
  std::string breakdown;
  for (const auto& [kind, n] : kinds)
    breakdown += fmt::format("{}{} {}", breakdown.empty() ? "" : ", ", n, kind);
  std::string out = fmt::format(
      "<section class=\"plan\" id=\"{}-plan\"><h3>{} plan: {} steps, {} launches per call, {} "
      "generated kernels{}</h3>\n<p>Launches: {}.</p>\n<p class=\"muted\">Intermediates at the "
      "traced sizes: {} at "
      "peak{}. Bars: {}.</p>\n<label><input type=\"checkbox\" class=\"show-views\"> show the {} "
      "host views (stride changes on the host, no launch)</label>\n<table "
      "class=\"hide-views\"><tr><th>#</th><th>step</th><th>group</th><th>what</th><th "
      "class=\"num\">ideal bytes</th>{}<th>cost</th></tr>\n",
      id, escape(p.title), p.steps.size(), p.launches(), p.kernels.size(),
      p.fallbacks() ? fmt::format(", <span class=\"warn\">{} fallbacks</span>", p.fallbacks()) : "",
      breakdown.empty() ? "none" : escape(breakdown), format_bytes(p.peak_bytes),
      p.arena.empty() ? "" : "; " + escape(p.arena),
      profiled ? "modeled H100 time per launch (KILN_PROFILE=1)"
               : "the bytes each step must move at least (run with KILN_PROFILE=1 for the "
                 "modeled time)",
      std::count_if(p.steps.begin(), p.steps.end(),
                    [](const StepFacts& s) { return s.kind == "host view"; }),
      profiled ? "<th class=\"num\">DRAM bytes</th><th class=\"num\">issue slots</th><th "
                 "class=\"num\">modeled</th><th>bound</th>"
               : "");
  for (std::size_t i = 0; i < p.steps.size(); ++i) {
    const StepFacts& s = p.steps[i];
    const ProfileFacts* pf = profile_of(profiles, p, s);
    double cost = pf ? pf->modeled_us : static_cast<double>(s.ideal_bytes);
    std::string what = escape(s.note);
    if (s.kernel >= 0) what = fmt::format("<a href=\"#{}-k{}\">{}</a>", id, s.kernel, what);
    if (!s.buffers.empty())
      what += fmt::format("<br><span class=\"muted\">{}</span>", escape(s.buffers));
    if (!s.reason.empty())
      what += fmt::format("<br><span class=\"warn\">fallback: {}</span>", escape(s.reason));
    std::string prof;
    if (profiled)
      prof = pf ? fmt::format(
                      "<td class=\"num\">{:.0f} ({:.2f}x ideal)</td><td "
                      "class=\"num\">{:.0f}</td><td class=\"num\">{:.2f} us</td><td>{}</td>",
                      pf->dram_bytes,
                      s.ideal_bytes ? pf->dram_bytes / static_cast<double>(s.ideal_bytes) : 0.0,
                      pf->issue_slots, pf->modeled_us, pf->bound)
                : "<td></td><td></td><td></td><td></td>";
    std::string row_class = s.kind == "host view" ? "step-view"
                            : s.kernel >= 0       ? "step-kernel"
                                                  : "step-other";
    if (s.absorbed) row_class += " absorbed";
    out += fmt::format(
        "<tr class=\"step {}{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td "
        "class=\"num\">{}</td>{}<td>{}</td></tr>\n",
        s.kernel >= 0 ? "kernel" : "other",
        max_cost > 0 && cost >= 0.5 * max_cost ? " expensive" : "", i, escape(s.kind), s.group,
        what, s.ideal_bytes, prof, s.launches() ? bar(cost, max_cost) : "");
  }
  return out + "</table></section>\n";
}

std::string kernels_section(const ProgramFacts& p, const Profiles& profiles,
                            const std::string& id) {
  std::string out = fmt::format(
      "<section class=\"kernels\" id=\"{}-kernels\"><h3>{} kernels "
      "({})</h3>\n",
      id, escape(p.title), p.kernels.size());
  for (std::size_t i = 0; i < p.kernels.size(); ++i) {
    const KernelFacts& k = p.kernels[i];
    auto pf = profiles.find(k.name);
    std::string prof =
        pf == profiles.end()
            ? ""
            : fmt::format(
                  "<tr><th>profile</th><td>{} launches; per launch {:.0f} DRAM bytes, "
                  "{:.0f} issue slots, {:.2f} us modeled ({}-bound)</td></tr>",
                  pf->second.launches, pf->second.dram_bytes, pf->second.issue_slots,
                  pf->second.modeled_us, escape(pf->second.bound));
    out += fmt::format(
        "<details class=\"kernel\" id=\"{}-k{}\"><summary><code>{}</code> — registers {}, spills "
        "{}, shared memory {}</summary>\n<table><tr><th>cache key</th><td><code>{}</code> "
        "(<code>kiln cache show {}</code>)</td></tr><tr><th>target</th><td>{}</td></tr>"
        "<tr><th>compile time</th><td>{}</td></tr>{}</table>\n<pre "
        "class=\"src\">{}</pre></details>\n",
        id, i, escape(k.name), resource(k.registers), resource(k.spill_bytes),
        resource(k.shared_bytes), escape(k.key), escape(k.key.substr(0, 12)), escape(k.arch),
        k.compile_ms < 0 ? std::string("n/a (not in the disk cache)")
                         : fmt::format("{:.1f} ms", k.compile_ms),
        prof, escape(k.source));
  }
  return out + "</section>\n";
}

// The steps that cost most, across the entry's plans: by modeled time when the profiler measured
// them, else by the bytes they must move.
std::string expensive_steps(const EntryFacts& e, const Profiles& profiles) {
  struct Row {
    double cost;
    const ProgramFacts* program;
    std::size_t step;
  };
  std::vector<Row> rows;
  bool profiled = false;
  for (const auto& p : e.programs)
    for (const auto& s : p.steps) profiled = profiled || profile_of(profiles, p, s);
  for (const auto& p : e.programs)
    for (std::size_t i = 0; i < p.steps.size(); ++i) {
      const StepFacts& s = p.steps[i];
      if (!s.launches()) continue;
      const ProfileFacts* pf = profile_of(profiles, p, s);
      if (profiled && !pf) continue;
      rows.push_back({pf ? pf->modeled_us : static_cast<double>(s.ideal_bytes), &p, i});
    }
  if (rows.empty()) return {};
  std::stable_sort(rows.begin(), rows.end(),
                   [](const Row& a, const Row& b) { return a.cost > b.cost; });
  std::string out = fmt::format(
      "<section class=\"expensive-steps\" id=\"entry-{}-expensive\"><h3>Most expensive "
      "steps</h3>\n<table><tr><th>plan</th><th>#</th><th>what</th><th class=\"num\">{}</th>"
      "</tr>\n",
      e.index, profiled ? "modeled H100 time per launch" : "ideal bytes");
  for (std::size_t i = 0; i < rows.size() && i < 8; ++i) {
    const StepFacts& s = rows[i].program->steps[rows[i].step];
    out += fmt::format(
        "<tr><td>{}</td><td><a href=\"#{}-plan\">{}</a></td><td>{}</td><td "
        "class=\"num\">{}</td></tr>\n",
        escape(rows[i].program->title), rows[i].program->graph.id, rows[i].step, escape(s.note),
        profiled ? fmt::format("{:.2f} us", rows[i].cost) : format_bytes(s.ideal_bytes));
  }
  return out + "</table></section>\n";
}

std::string entry_section(const EntryFacts& e, const Profiles& profiles) {
  std::string out = fmt::format(
      "<section class=\"entry\" id=\"entry-{0}\"><h2>Entry {0}</h2>\n<p>Traced because: <span "
      "class=\"reason\">{1}</span>. Compiled in {2:.1f} ms; runs as {3}; {4} launches per "
      "call.</p>\n<details class=\"guards\"><summary>guards</summary><pre>{5}</pre></details>\n",
      e.index, escape(e.reason), e.compile_ms, escape(e.runs_as), e.launches_per_call(),
      escape(e.guards));
  out += expensive_steps(e, profiles);
  for (const auto& p : e.programs) out += graph_section(p.graph);
  if (e.training) out += partition_section(e);
  for (const auto& p : e.programs) {
    if (p.steps.empty()) continue;
    out += plan_section(p, profiles, p.graph.id);
    out += kernels_section(p, profiles, p.graph.id);
  }
  return out + "</section>\n";
}

}  // namespace

std::string function_summary(const FunctionFacts& f, const Profiles& profiles) {
  nlohmann::json j;
  j["function"] = f.name;
  j["page"] = f.page;
  j["entries"] = f.entries.size();
  j["recompiles"] = f.entries.empty() ? 0 : f.entries.size() - 1;
  nlohmann::json reasons = nlohmann::json::array(), launches = nlohmann::json::array();
  double compile_ms = 0, modeled_us = 0;
  std::size_t kernels = 0;
  for (const auto& e : f.entries) {
    if (e.index > 0) reasons.push_back(e.reason);
    launches.push_back(e.launches_per_call());
    compile_ms += e.compile_ms;
    for (const auto& p : e.programs) {
      kernels += p.kernels.size();
      for (const auto& s : p.steps)
        if (const ProfileFacts* pf = profile_of(profiles, p, s)) modeled_us += pf->modeled_us;
    }
  }
  j["reasons"] = reasons;
  j["launches_per_call"] = launches;
  j["kernels"] = kernels;
  j["compile_ms"] = compile_ms;
  j["modeled_us"] = modeled_us;
  return j.dump();
}

std::string function_page(const FunctionFacts& f, const Profiles& profiles) {
  std::string body = fmt::format(
      "<nav><a href=\"index.html\">all compiled functions</a></nav>\n<h1>Compiled function "
      "<code>{}</code></h1>\n<p>{} entries ({} recompiles).</p>\n",
      escape(f.name), f.entries.size(), f.entries.empty() ? 0 : f.entries.size() - 1);
  body += entries_section(f);
  for (const auto& e : f.entries) body += entry_section(e, profiles);
  return page("kiln: " + f.name, body, function_summary(f, profiles));
}

}  // namespace kiln::jit::report

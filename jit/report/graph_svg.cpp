// The report's graph pictures (see graph_svg.h).
#include "jit/report/graph_svg.h"

#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace kiln::jit::report {

namespace {

// A DOT string literal's content.
std::string dot_quote(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c == '\n' ? ' ' : c;
  }
  return out;
}

std::string shorten(const std::string& s, std::size_t n) {
  return s.size() <= n ? s : s.substr(0, n - 3) + "...";
}

// Where a group's shape says what it is: a library call, attention, a fallback, a host view.
std::string group_style(const graph::FusionGroup& g) {
  switch (g.kind) {
    case graph::FusionKind::matmul:
      return "shape=box3d, penwidth=2";
    case graph::FusionKind::attention:
      return "shape=octagon, penwidth=2";
    case graph::FusionKind::unrendered:
      return "shape=box, color=\"#c62828\", penwidth=3";
    case graph::FusionKind::view:
      return "shape=box, style=\"filled,dashed\"";
    default:
      return "shape=box";
  }
}

std::optional<std::string> find_dot() {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/dot";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return std::nullopt;
}

}  // namespace

std::string group_colour(int group) {
  static constexpr std::array<const char*, 12> palette = {
      "#cfe8fc", "#fde2c4", "#d5f5d0", "#f7d1e0", "#e3dbf7", "#fff3b0",
      "#c9f0ee", "#f5d5c8", "#dfe9c0", "#e0e0f5", "#f9e0f9", "#d9ecd9"};
  return palette[static_cast<std::size_t>(group) % palette.size()];
}

std::string groups_dot(const GraphFacts& f) {
  std::string out =
      "digraph groups {\n  rankdir=TB; node [fontname=\"Helvetica\", fontsize=10, "
      "style=filled]; edge [fontname=\"Helvetica\", fontsize=8, color=\"#666666\"];\n";
  // The group kinds as graph::FusionGroup knows them, to pick a shape.
  for (std::size_t i = 0; i < f.groups.size(); ++i) {
    const GroupFacts& g = f.groups[i];
    graph::FusionGroup shape_of;
    shape_of.kind = g.library                ? graph::FusionKind::matmul
                    : g.attention            ? graph::FusionKind::attention
                    : g.kind == "unrendered" ? graph::FusionKind::unrendered
                    : g.kind == "view"       ? graph::FusionKind::view
                                             : graph::FusionKind::pointwise;
    std::string label =
        fmt::format("g{} {}\\n{}\\n{} node{}", i, g.kind, dot_quote(shorten(g.name, 40)),
                    g.nodes.size(), g.nodes.size() == 1 ? "" : "s");
    out += fmt::format(
        "  g{} [id=\"{}g{}\", label=\"{}\", fillcolor=\"{}\", {}, tooltip=\"group {}: {} {} "
        "(click for its nodes)\"];\n",
        i, f.id, i, label, group_colour(static_cast<int>(i)), group_style(shape_of), i, g.kind,
        dot_quote(g.name));
  }
  // One edge per pair of groups: the first reason on it, all of them in its tooltip.
  std::map<std::pair<int, int>, std::vector<const CutFacts*>> edges;
  for (const auto& c : f.cuts) edges[{c.producer, c.consumer}].push_back(&c);
  for (const auto& [pair, cuts] : edges) {
    std::string all;
    for (const CutFacts* c : cuts)
      all += fmt::format("{} -> {}: {}; ", c->value, c->consumer_op, c->reason);
    std::string label = shorten(cuts.front()->reason, 42);
    if (cuts.size() > 1) label += fmt::format(" (+{})", cuts.size() - 1);
    out += fmt::format("  g{} -> g{} [label=\"{}\", tooltip=\"{}\"];\n", pair.first, pair.second,
                       dot_quote(label), dot_quote(all));
  }
  return out + "}\n";
}

std::string nodes_dot(const graph::Graph& g, const graph::Partition& fusion) {
  std::string out =
      "digraph nodes {\n  rankdir=TB; node [fontname=\"Helvetica\", fontsize=9]; "
      "edge [fontname=\"Helvetica\", fontsize=7, color=\"#888888\"];\n";
  for (std::size_t gi = 0; gi < fusion.groups.size(); ++gi) {
    const graph::FusionGroup& group = fusion.groups[gi];
    out += fmt::format(
        "  subgraph cluster_{} {{ label=\"g{} {} {}\"; style=filled; fillcolor=\"{}\"; "
        "fontsize=9;\n",
        gi, gi, graph::fusion_kind_name(group.kind), dot_quote(shorten(group.name, 40)),
        group_colour(static_cast<int>(gi)));
    for (int n : group.nodes) {
      const graph::Node& node = g.nodes[n];
      std::string extra = group.kind == graph::FusionKind::matmul      ? ", shape=box3d"
                          : group.kind == graph::FusionKind::attention ? ", shape=octagon"
                                                                       : ", shape=box";
      out += fmt::format("    n{} [label=\"%{} = {}\", style=filled, fillcolor=white{}];\n", n,
                         node.outputs.empty() ? -1 : node.outputs.front(),
                         dot_quote(fmt::format("{}", node.op)), extra);
    }
    out += "  }\n";
  }
  std::map<std::pair<int, int>, std::string> cut;  // (value, consumer node) -> reason
  for (const auto& e : fusion.unfused) cut[{e.value, e.consumer_node}] = e.reason;
  for (const auto& in : g.inputs)
    out += fmt::format(
        "  v{} [label=\"{}\", shape=ellipse, fontsize=8];\n", in.value,
        dot_quote(shorten(in.name.empty() ? fmt::format("%{}", in.value) : in.name, 24)));
  for (std::size_t n = 0; n < g.nodes.size(); ++n)
    for (int v : g.nodes[n].inputs) {
      int producer = g.values[v].producer;
      std::string from = producer >= 0 ? fmt::format("n{}", producer) : fmt::format("v{}", v);
      if (producer < 0 && !g.input_of(v)) continue;
      auto it = cut.find({v, static_cast<int>(n)});
      if (it != cut.end())
        out += fmt::format("  {} -> n{} [label=\"{}\", tooltip=\"{}\", color=\"#c62828\"];\n", from,
                           n, dot_quote(shorten(it->second, 36)), dot_quote(it->second));
      else
        out += fmt::format("  {} -> n{};\n", from, n);
    }
  return out + "}\n";
}

std::optional<std::string> render_svg(const std::string& dot, std::string& problem) {
  std::optional<std::string> dot_program = find_dot();  // PATH may change (tests change it)
  if (!dot_program) {
    problem = "Graphviz's `dot` is not on PATH (Debian: apt-get install graphviz)";
    return std::nullopt;
  }
  std::error_code ec;
  auto dir = std::filesystem::temp_directory_path(ec);
  std::string in = (dir / fmt::format("kiln-report-{}-XXXXXX", ::getpid())).string();
  int fd = ::mkstemp(in.data());
  if (fd < 0) {
    problem = "cannot create a temporary file for Graphviz";
    return std::nullopt;
  }
  ::close(fd);
  { std::ofstream(in) << dot; }
  // `timeout` keeps a pathological layout from stalling the program being reported on.
  std::string command = fmt::format("timeout 60 '{}' -Tsvg '{}' 2>/dev/null", *dot_program, in);
  std::string svg;
  if (FILE* pipe = ::popen(command.c_str(), "r")) {
    std::array<char, 65536> buffer;
    std::size_t n;
    while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0)
      svg.append(buffer.data(), n);
    int status = ::pclose(pipe);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) svg.clear();
  }
  std::filesystem::remove(in, ec);
  std::size_t start = svg.find("<svg");
  if (start == std::string::npos) {
    problem = "Graphviz's `dot` failed on this graph";
    return std::nullopt;
  }
  return svg.substr(start);
}

void render_pictures(const graph::Graph& graph, const graph::Partition& fusion, GraphFacts& f) {
  if (auto svg = render_svg(groups_dot(f), f.svg_problem)) f.groups_svg = std::move(*svg);
  if (f.groups_svg.empty() || f.nodes > kMaxNodesPictured) return;
  if (auto svg = render_svg(nodes_dot(graph, fusion), f.svg_problem)) f.nodes_svg = std::move(*svg);
}

}  // namespace kiln::jit::report

// einsum as a composite: operands are reduced over the indices only they carry, then folded left
// to right, each pair contracted by one batched matmul (batch, free and contracted indices
// permuted and reshaped into [B, M, K] x [B, K, N]), and the result permuted to the output.
#include <algorithm>
#include <cctype>
#include <map>

#include "autograd/autocast.h"
#include "autograd/ops.h"
#include "runtime/trace_hooks.h"

namespace kiln {

namespace {

// Index labels: letters are their char; ellipsis dims are kEllipsis + position (right-aligned).
using Label = int;
using Labels = std::vector<Label>;
constexpr Label kEllipsis = 1000;

struct Operand {
  Tensor t;
  Labels labels;
};

struct Term {
  std::string letters;  // with '.' for the ellipsis position
  bool ellipsis = false;
};

Term parse_term(std::string_view s, std::string_view equation) {
  Term term;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '.') {
      KILN_CHECK(!term.ellipsis && s.substr(i, 3) == "...",
                 "einsum: malformed ellipsis in '{}' (one '...' per term)", equation);
      term.ellipsis = true;
      term.letters += '.';
      i += 2;
      continue;
    }
    KILN_CHECK(std::isalpha(static_cast<unsigned char>(s[i])),
               "einsum: '{}' in '{}' is not an index letter", s[i], equation);
    term.letters += s[i];
  }
  return term;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= s.size(); ++i)
    if (i == s.size() || s[i] == sep) {
      out.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  return out;
}

// The labels of a term for a tensor of `rank` dims, with `ellipsis_rank` broadcast dims overall.
Labels label_term(const Term& term, std::int64_t rank, std::int64_t ellipsis_rank) {
  Labels out;
  std::int64_t letters = static_cast<std::int64_t>(term.letters.size()) - (term.ellipsis ? 1 : 0);
  std::int64_t own = rank - letters;  // this operand's ellipsis dims
  for (char c : term.letters) {
    if (c != '.') {
      out.push_back(static_cast<unsigned char>(c));
      continue;
    }
    for (std::int64_t k = ellipsis_rank - own; k < ellipsis_rank; ++k)
      out.push_back(kEllipsis + static_cast<Label>(k));
  }
  return out;
}

std::string label_str(const Labels& labels) {
  std::string out;
  for (Label l : labels) out += l >= kEllipsis ? '.' : static_cast<char>(l);
  return out;
}

bool contains(const Labels& labels, Label l) {
  return std::find(labels.begin(), labels.end(), l) != labels.end();
}

// Sums out the labels of `op` that `keep` does not hold.
Operand reduce_to(const Operand& op, const Labels& keep) {
  Dims dims;
  Labels kept;
  for (std::size_t d = 0; d < op.labels.size(); ++d) {
    if (contains(keep, op.labels[d]))
      kept.push_back(op.labels[d]);
    else
      dims.push_back(static_cast<std::int64_t>(d));
  }
  if (dims.empty()) return op;
  return {sum(op.t, dims), kept};
}

// `op` permuted to `order`, each label's dim expanded to `sizes[label]`, then flattened into
// groups of the given lengths.
Tensor arrange(const Operand& op, const Labels& order, const std::map<Label, SymInt>& sizes,
               const std::vector<std::size_t>& groups) {
  Dims perm;
  SymShape expanded;
  for (Label l : order) {
    auto it = std::find(op.labels.begin(), op.labels.end(), l);
    perm.push_back(it - op.labels.begin());
    expanded.push_back(sizes.at(l));
  }
  Tensor t = expand(permute(op.t, perm), expanded);
  SymShape grouped;
  std::size_t at = 0;
  for (std::size_t g : groups) {
    SymInt n = 1;
    for (std::size_t k = 0; k < g; ++k) n *= expanded[at++];
    grouped.push_back(n);
  }
  return reshape(t, grouped);
}

Operand contract(const Operand& a_in, const Operand& b_in, const Labels& keep,
                 const std::map<Label, SymInt>& sizes) {
  Labels keep_a = keep, keep_b = keep;
  keep_a.insert(keep_a.end(), b_in.labels.begin(), b_in.labels.end());
  keep_b.insert(keep_b.end(), a_in.labels.begin(), a_in.labels.end());
  Operand a = reduce_to(a_in, keep_a), b = reduce_to(b_in, keep_b);
  Labels batch, left, right, inner;
  for (Label l : a.labels) {
    if (!contains(b.labels, l))
      left.push_back(l);
    else if (contains(keep, l))
      batch.push_back(l);
    else
      inner.push_back(l);
  }
  for (Label l : b.labels)
    if (!contains(a.labels, l)) right.push_back(l);
  Labels a_order = batch, b_order = batch;
  a_order.insert(a_order.end(), left.begin(), left.end());
  a_order.insert(a_order.end(), inner.begin(), inner.end());
  b_order.insert(b_order.end(), inner.begin(), inner.end());
  b_order.insert(b_order.end(), right.begin(), right.end());
  Tensor am = arrange(a, a_order, sizes, {batch.size(), left.size(), inner.size()});
  Tensor bm = arrange(b, b_order, sizes, {batch.size(), inner.size(), right.size()});
  Tensor product = matmul(am, bm);  // [B, M, N]
  Labels labels = batch;
  labels.insert(labels.end(), left.begin(), left.end());
  labels.insert(labels.end(), right.begin(), right.end());
  SymShape shape;
  for (Label l : labels) shape.push_back(sizes.at(l));
  return {reshape(product, shape), labels};
}

}  // namespace

Tensor einsum(std::string_view equation_in, const std::vector<Tensor>& operands) {
  KILN_OP_SCOPE;
  if (autocast_state().enabled) {  // the operands in the low dtype; its sums and matmuls too
    auto low = autograd::autocast_inputs(AutocastPolicy::lower_precision, operands);
    autograd::AutocastOff off;
    return einsum(equation_in, low);
  }
  std::string equation;
  for (char c : equation_in)
    if (c != ' ') equation += c;
  KILN_CHECK(!operands.empty(), "einsum: '{}' needs at least one operand", equation);
  std::size_t arrow = equation.find("->");
  std::string_view lhs = std::string_view(equation).substr(0, arrow);
  auto input_terms = split(lhs, ',');
  KILN_CHECK(input_terms.size() == operands.size(),
             "einsum: '{}' has {} input terms but {} operands were given", equation,
             input_terms.size(), operands.size());

  std::vector<Term> terms;
  std::int64_t ellipsis_rank = 0;
  for (std::size_t i = 0; i < operands.size(); ++i) {
    terms.push_back(parse_term(input_terms[i], equation));
    const Term& t = terms.back();
    std::int64_t letters = static_cast<std::int64_t>(t.letters.size()) - (t.ellipsis ? 1 : 0);
    std::int64_t rank = operands[i].dim();
    KILN_CHECK_AS(ShapeError, t.ellipsis ? rank >= letters : rank == letters,
                  "einsum: term '{}' of '{}' does not fit operand {} of shape {}", input_terms[i],
                  equation, i, shape_str(operands[i].impl().shape));
    if (t.ellipsis) ellipsis_rank = std::max(ellipsis_rank, rank - letters);
    // Contractions are matmuls, which take no bools; checked here so the message names einsum.
    KILN_CHECK_AS(DTypeError, operands.size() == 1 || operands[i].dtype() != DType::bool_,
                  "einsum: bool operands are not supported ('{}', operand {} of shape {})",
                  equation, i, shape_str(operands[i].impl().shape));
  }

  // Label every operand; check sizes agree (or broadcast from 1) and that no label repeats.
  std::vector<Operand> ops;
  std::map<Label, SymInt> sizes;
  std::map<Label, int> count;
  for (std::size_t i = 0; i < operands.size(); ++i) {
    Labels labels = label_term(terms[i], operands[i].dim(), ellipsis_rank);
    for (std::size_t d = 0; d < labels.size(); ++d) {
      Label l = labels[d];
      KILN_CHECK(std::count(labels.begin(), labels.end(), l) == 1,
                 "einsum: index '{}' repeats in term '{}' of '{}'; diagonals are not supported",
                 label_str({l}), input_terms[i], equation);
      ++count[l];
      SymInt size = operands[i].size(static_cast<std::int64_t>(d));
      auto [it, fresh] = sizes.try_emplace(l, size);
      std::int64_t have = it->second.traced_value(), now = size.traced_value();
      KILN_CHECK_AS(ShapeError, fresh || have == now || have == 1 || now == 1,
                    "einsum: index '{}' of '{}' has size {} in one operand and {} in operand {} "
                    "(shape {})",
                    label_str({l}), equation, have, now, i, shape_str(operands[i].impl().shape));
      if (!fresh && have == 1) it->second = size;
    }
    ops.push_back({operands[i], labels});
  }

  Labels output;
  if (arrow != std::string::npos) {
    Term out = parse_term(std::string_view(equation).substr(arrow + 2), equation);
    output = label_term(out,
                        static_cast<std::int64_t>(out.letters.size()) - (out.ellipsis ? 1 : 0) +
                                 (out.ellipsis ? ellipsis_rank : 0),
                        ellipsis_rank);
    for (Label l : output) {
      KILN_CHECK(std::count(output.begin(), output.end(), l) == 1,
                 "einsum: index '{}' repeats in the output of '{}'", label_str({l}), equation);
      KILN_CHECK(sizes.count(l), "einsum: output index '{}' of '{}' is in no input", label_str({l}),
                 equation);
    }
  } else {  // implicit: the broadcast dims, then the indices that appear once, alphabetically
    for (std::int64_t k = 0; k < ellipsis_rank; ++k)
      output.push_back(kEllipsis + static_cast<Label>(k));
    for (auto [l, n] : count)
      if (l < kEllipsis && n == 1) output.push_back(l);
  }

  // Fold left; each step keeps the labels the output or a later operand still needs.
  auto needed_after = [&](std::size_t k) {
    Labels keep = output;
    for (std::size_t j = k + 1; j < ops.size(); ++j)
      keep.insert(keep.end(), ops[j].labels.begin(), ops[j].labels.end());
    return keep;
  };
  Operand acc = reduce_to(ops[0], needed_after(0));
  for (std::size_t k = 1; k < ops.size(); ++k) acc = contract(acc, ops[k], needed_after(k), sizes);
  acc = reduce_to(acc, output);

  Dims perm;
  for (Label l : output)
    perm.push_back(std::find(acc.labels.begin(), acc.labels.end(), l) - acc.labels.begin());
  Tensor result = permute(acc.t, perm);
  // A size-1 dim broadcast against a larger one keeps the larger size in the output.
  SymShape shape;
  for (Label l : output) shape.push_back(sizes.at(l));
  return expand(result, shape);
}

}  // namespace kiln

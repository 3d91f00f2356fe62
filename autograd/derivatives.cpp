// One derivative rule per differentiable primitive, written with kiln ops so the same rule serves
// eager, traced and compiled backward. Rules return the gradient at the op's broadcast shape and
// promoted dtype; OpNode reduces it to each input's shape and dtype. Which inputs and outputs a
// rule may read the values of is declared in the op table (runtime/ops.def); the others are
// metadata only. Ops whose gradient is zero (sign, floor, ...) need no rule here.
#include <cmath>
#include <numbers>

#include "autograd/attention.h"
#include "autograd/node.h"
#include "autograd/ops.h"
#include "autograd/record.h"
#include "runtime/attention_inputs.h"
#include "runtime/grad_mode.h"

namespace kiln::autograd {

namespace {

// Zeros with `like`'s shape and device, in `dtype`.
Tensor zeros_of(const Tensor& like, DType dtype) {
  return zeros(like.impl().shape, dtype, like.device());
}

// The gradient of a reduction's output, broadcast back over the reduced dims of `x`.
Tensor expand_reduced(const Tensor& g, const Tensor& x, const Dims& dims_in, bool keepdim) {
  auto dims = normalize_dims(dims_in, x.dim(), "backward");
  Tensor out = g;
  if (!keepdim)
    for (auto d : dims) out = unsqueeze(out, d);
  return expand(out, x.sym_shape());
}

Tensor prod_backward(const Tensor& g, const Tensor& x, const OpAttrs& attrs) {
  // Exact with zeros: one zero in a slice passes the product of the others to it; two or more
  // zeros make every gradient in the slice zero.
  Tensor is_zero = eq(x, 0);
  Tensor zeros_in_slice = expand(sum(cast(is_zero, x.dtype()), attrs.dims, true), x.sym_shape());
  Tensor nonzero_prod = expand(prod(where(is_zero, 1, x), attrs.dims, true), x.sym_shape());
  Tensor grad_full = expand_reduced(g, x, attrs.dims, attrs.keepdim);
  Tensor no_zero = nonzero_prod / where(is_zero, 1, x);
  Tensor one_zero = where(is_zero, nonzero_prod, 0);
  Tensor local = where(eq(zeros_in_slice, 0), no_zero, where(eq(zeros_in_slice, 1), one_zero, 0));
  return grad_full * local;
}

Tensor slice_backward(const Tensor& g, const Tensor& x, const OpAttrs& attrs) {
  if (attrs.step == 1) {  // a pad of the gradient: no index tensor, fusable
    Dims pads(2 * static_cast<std::size_t>(x.dim() - attrs.dim), 0);
    std::size_t pair = 2 * static_cast<std::size_t>(x.dim() - 1 - attrs.dim);
    pads[pair] = attrs.start;
    pads[pair + 1] = x.impl().shape[attrs.dim] - attrs.end;
    return pad(g, pads);
  }
  Tensor index = arange(static_cast<double>(attrs.start), static_cast<double>(attrs.end),
                        static_cast<double>(attrs.step));
  if (!g.device().is_cpu()) index = index.to(g.device());
  return index_add(zeros_of(x, g.dtype()), attrs.dim, index, g);
}

// dq, dk, dv (and a floating mask's gradient) of one attention call. The attention_backward op
// takes the gradient of `out` alone; a gradient of `lse`, a mask's gradient, or a backward that
// must itself be differentiable (create_graph) take the primitive-op form instead.
std::vector<Tensor> attention_gradients(const DerivativeArgs& args, bool mask_grad) {
  const auto& in = args.inputs;
  AttentionInputs layout = attention_inputs(OpId::attention, in.size(), args.attrs);
  Tensor mask = layout.mask ? in[*layout.mask] : Tensor();
  ProbabilityDropout dropout;
  if (layout.seed) dropout = {args.attrs.dropout, in[*layout.seed], in[*layout.seed + 1]};
  const Tensor& dout = args.grads.at(0);
  const Tensor dlse = args.grads.size() > 1 ? args.grads[1] : Tensor();
  if (grad_enabled() || dlse.defined() || mask_grad || !dout.defined()) {
    AttentionGradients g = attention_gradients_decomposed(
        in[0], in[1], in[2], mask, dout, dlse, args.attrs.scale, args.attrs.causal, dropout);
    return {g.dq, g.dk, g.dv, g.dmask};
  }
  std::vector<Tensor> operands{in[0], in[1], in[2], args.outputs.at(0), args.outputs.at(1), dout};
  if (mask.defined()) operands.push_back(mask);
  if (layout.seed) operands.insert(operands.end(), {dropout.seed, dropout.offset});
  std::vector<Tensor> grads = record_outputs(OpId::attention_backward, operands, args.attrs);
  grads.emplace_back();
  return grads;
}

// The gradient of input i: q, k, v, or a floating additive mask (the seed and offset of a
// dropout are integers, which get none).
Tensor attention_derivative(const DerivativeArgs& args, std::size_t i) {
  AttentionInputs layout = attention_inputs(OpId::attention, args.inputs.size(), args.attrs);
  if (layout.mask && i == *layout.mask) {  // rare, so computed on its own
    std::vector<Tensor> grads = attention_gradients(args, true);
    return grads[3];
  }
  if (!args.all_inputs) return attention_gradients(args, false).at(i);
  if (args.all_inputs->empty()) *args.all_inputs = attention_gradients(args, false);
  return args.all_inputs->at(i);
}

}  // namespace

Tensor derivative(const DerivativeArgs& args, std::size_t i) {
  const auto& in = args.inputs;
  const auto& attrs = args.attrs;
  const Tensor& g = args.grads.at(0);
  const Tensor y = args.outputs.empty() ? Tensor() : args.outputs[0];
  // Every op is listed, so that a new op fails to build until it has a rule or is listed
  // among those without one.
  switch (args.op) {
    // ---- elementwise, unary: x is the input, y the output ----
    case OpId::neg:
      return neg(g);
    case OpId::abs:
      return g * sign(in[0]);
    case OpId::exp:
      return g * y;
    case OpId::log:
      return g / in[0];
    case OpId::log1p:
      return g / (in[0] + 1);
    case OpId::expm1:
      return g * (y + 1);
    case OpId::sqrt:
      return g / (y * 2);
    case OpId::rsqrt:
      return g * y * y * y * -0.5;
    case OpId::reciprocal:
      return neg(g) * y * y;
    case OpId::sin:
      return g * cos(in[0]);
    case OpId::cos:
      return neg(g) * sin(in[0]);
    case OpId::tanh:
      return g * (1 - y * y);
    case OpId::sigmoid:
      return g * y * (1 - y);
    case OpId::relu:
      return where(gt(y, 0), g, 0);
    case OpId::silu: {
      const Tensor& x = in[0];
      Tensor s = sigmoid(x);
      return g * s * (1 + x * (1 - s));
    }
    case OpId::erf: {
      const Tensor& x = in[0];
      return g * exp(neg(x * x)) * (2.0 / std::sqrt(std::numbers::pi));
    }
    case OpId::gelu: {
      const Tensor& x = in[0];
      Tensor cdf = (erf(x * (1.0 / std::numbers::sqrt2)) + 1) * 0.5;
      Tensor pdf = exp(x * x * -0.5) * (1.0 / std::sqrt(2.0 * std::numbers::pi));
      return g * (cdf + x * pdf);
    }
    case OpId::gelu_tanh: {
      const Tensor& x = in[0];
      const double k = std::sqrt(2.0 / std::numbers::pi), c = 0.044715;
      Tensor t = tanh((x + x * x * x * c) * k);
      Tensor du = (x * x * (3.0 * c) + 1) * k;
      return g * ((t + 1) * 0.5 + x * 0.5 * (1 - t * t) * du);
    }
    case OpId::softplus: {
      Tensor z = in[0] * attrs.beta;
      return where(gt(z, attrs.threshold), g, g * sigmoid(z));
    }
    case OpId::tril:
      return tril(g, attrs.diagonal);
    case OpId::triu:
      return triu(g, attrs.diagonal);
    case OpId::copy:
    case OpId::cast:
      return g;
    // ---- elementwise, binary: a and b the inputs, i the one differentiated ----
    case OpId::add:
      return g;
    case OpId::sub:
      return i == 0 ? g : neg(g);
    case OpId::mul:
      return g * (i == 0 ? in[1] : in[0]);
    case OpId::div: {
      const Tensor &a = in[0], &b = in[1];
      return i == 0 ? g / b : neg(g) * a / (b * b);
    }
    case OpId::pow: {
      const Tensor &a = in[0], &b = in[1];
      // pow(x, 0) has gradient 0 in x everywhere, also at x = 0 where b * x^(b-1) is 0 * inf.
      if (i == 0) return where(eq(b, 0), 0, g * b * pow(a, b - 1));
      // d/db a^b = a^b log a, taken as 0 where a == 0 and b >= 0 (the limit), as PyTorch does.
      return where(logical_and(eq(a, 0), ge(b, 0)), 0, g * y * log(a));
    }
    case OpId::maximum:
    case OpId::minimum: {
      const Tensor &self = i == 0 ? in[0] : in[1], &other = i == 0 ? in[1] : in[0];
      Tensor wins = args.op == OpId::maximum ? gt(self, other) : lt(self, other);
      return where(wins, g, where(eq(self, other), g * 0.5, 0));
    }
    case OpId::remainder:
      return i == 0 ? g : neg(g) * floor_divide(in[0], in[1]);
    // ---- the others ----
    case OpId::where:
      return i == 1 ? where(in[0], g, 0) : where(in[0], 0, g);
    case OpId::to_device:
      return g.to(in[0].device());
    case OpId::sum:
      return expand_reduced(g, in[0], attrs.dims, attrs.keepdim);
    case OpId::prod:
      return prod_backward(g, in[0], attrs);
    case OpId::amax:
    case OpId::amin: {
      // Ties share the gradient evenly.
      const Tensor& x = in[0];
      Tensor extreme = expand_reduced(y, x, attrs.dims, attrs.keepdim);
      Tensor mask = cast(eq(x, extreme), g.dtype());
      Tensor count = expand(sum(mask, attrs.dims, true), x.sym_shape());
      return expand_reduced(g, x, attrs.dims, attrs.keepdim) * mask / count;
    }
    case OpId::max_dim:
    case OpId::min_dim: {
      // The whole gradient goes to the selected element, as in PyTorch's max(dim).
      const Tensor& x = in[0];
      if (x.dim() == 0) return g;
      Tensor index = args.outputs.at(1), grad = g;
      if (!attrs.keepdim) {
        index = unsqueeze(index, attrs.dim);
        grad = unsqueeze(grad, attrs.dim);
      }
      return scatter_add(zeros_of(x, g.dtype()), attrs.dim, index, grad);
    }
    case OpId::sort:
    case OpId::topk: {
      // Each value's gradient goes back to the element it came from (distinct indices).
      const Tensor& x = in[0];
      if (x.dim() == 0) return g;
      return scatter_add(zeros_of(x, g.dtype()), attrs.dim, args.outputs.at(1), g);
    }
    case OpId::cumsum:
      return cumsum(g, attrs.dim, !attrs.reverse);
    case OpId::softmax:
      return y * (g - sum(g * y, {attrs.dim}, true));
    case OpId::log_softmax:
      return g - exp(y) * sum(g, {attrs.dim}, true);
    case OpId::reshape:
      return reshape(g, in[0].sym_shape());
    case OpId::permute: {
      Dims inverse(attrs.dims.size());
      for (std::size_t d = 0; d < attrs.dims.size(); ++d)
        inverse[normalize_dim(attrs.dims[d], in[0].dim(), "permute")] =
            static_cast<std::int64_t>(d);
      return permute(g, inverse);
    }
    case OpId::expand:
      return g;  // OpNode sums it back to the input's shape
    case OpId::slice:
      return slice_backward(g, in[0], attrs);
    case OpId::matmul:
      // A weight shared across a batch: one [K, B*M] x [B*M, N] product, not one product per
      // batch element summed afterwards (B times the traffic).
      if (i == 1 && in[1].dim() == 2 && in[0].dim() > 2)
        return matmul(transpose(flatten(in[0], 0, -2), 0, 1), flatten(g, 0, -2));
      return i == 0 ? matmul(g, transpose(in[1], -1, -2)) : matmul(transpose(in[0], -1, -2), g);
    case OpId::gather:
      return scatter_add(zeros_of(in[0], g.dtype()), attrs.dim, in[1], g);
    case OpId::index_select:
      return index_add(zeros_of(in[0], g.dtype()), attrs.dim, in[1], g);
    case OpId::scatter_add: {
      if (i == 0) return g;
      // src positions beyond the index's extent were never scattered: their gradient is 0.
      Tensor picked = gather(g, attrs.dim, in[1]);
      Dims pads;
      for (std::int64_t d = in[2].dim(); d-- > 0;) {
        pads.push_back(0);
        pads.push_back(in[2].impl().shape[d] - in[1].impl().shape[d]);
      }
      return pad(picked, pads);
    }
    case OpId::index_add:
      return i == 0 ? g : index_select(g, attrs.dim, in[1]);
    case OpId::index_copy:  // self's gradient, but at the slices source replaced
      return i == 0 ? index_copy(g, attrs.dim, in[1], zeros_of(in[2], g.dtype()))
                    : index_select(g, attrs.dim, in[1]);
    case OpId::cat: {
      std::int64_t dim = normalize_dim(attrs.dim, in[0].dim(), "cat");
      std::int64_t start = 0;
      for (std::size_t k = 0; k < i; ++k) start += in[k].impl().shape[dim];
      return slice(g, dim, start, start + in[i].impl().shape[dim]);
    }
    case OpId::attention:
      return attention_derivative(args, i);
    case OpId::pad: {
      // Padding by the negated amounts undoes a pad (crops) and a crop (pads with zeros).
      Dims negated;
      for (auto p : attrs.dims) negated.push_back(-p);
      return pad(g, negated);
    }
    // No rule: the gradient is zero (Grad::zero) or none flows (Grad::none); the engine never
    // asks for these.
    case OpId::sign:
    case OpId::floor:
    case OpId::ceil:
    case OpId::round:
    case OpId::trunc:
    case OpId::logical_not:
    case OpId::floor_divide:
    case OpId::eq:
    case OpId::ne:
    case OpId::lt:
    case OpId::le:
    case OpId::gt:
    case OpId::ge:
    case OpId::logical_and:
    case OpId::logical_or:
    case OpId::argmax:
    case OpId::argmin:
    case OpId::detach:
    case OpId::attention_backward:
    case OpId::cached_attention:
    case OpId::random_uniform:
    case OpId::random_normal:
    case OpId::random_int:
      break;
  }
  throw Error(fmt::format("{}: no derivative rule", args.op));
}

}  // namespace kiln::autograd

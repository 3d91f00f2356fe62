// One derivative rule per primitive op, written with kiln ops so the same rule serves eager,
// traced and compiled backward. Rules return the gradient at the op's broadcast shape and
// promoted dtype; OpNode reduces it to each input's shape and dtype.
#include <cmath>
#include <numbers>

#include "autograd/node.h"
#include "autograd/ops.h"

namespace kiln::autograd {

bool is_differentiable(OpId op) {
  switch (op) {
    case OpId::eq:
    case OpId::ne:
    case OpId::lt:
    case OpId::le:
    case OpId::gt:
    case OpId::ge:
    case OpId::logical_and:
    case OpId::logical_or:
    case OpId::logical_not:
    case OpId::argmax:
    case OpId::argmin:
    case OpId::sign: return false;
    default: return true;
  }
}

bool reads_input_values(OpId op, std::size_t i) {
  switch (op) {
    case OpId::neg:
    case OpId::add:
    case OpId::sub:
    case OpId::sum:
    case OpId::reshape:
    case OpId::permute:
    case OpId::expand:
    case OpId::slice:
    case OpId::cast:
    case OpId::copy:
    case OpId::cat:
    case OpId::pad: return false;
    case OpId::where: return i == 0;  // the condition
    case OpId::gather:
    case OpId::index_select:
    case OpId::scatter_add:
    case OpId::index_add: return i == 1;  // the index
    default: return true;
  }
}

namespace {

// The gradient of a reduction's output, broadcast back over the reduced dims of `x`.
Tensor expand_reduced(const Tensor& g, const Tensor& x, const OpAttrs& attrs) {
  auto dims = normalize_dims(attrs.dims, x.dim(), "backward");
  Tensor out = g;
  if (!attrs.keepdim)
    for (auto d : dims) out = unsqueeze(out, d);
  return expand(out, x.shape());
}

Tensor reduced_keepdim(OpId op, const Tensor& x, const OpAttrs& attrs) {
  switch (op) {
    case OpId::amax: return amax(x, attrs.dims, true);
    case OpId::amin: return amin(x, attrs.dims, true);
    default: return sum(x, attrs.dims, true);
  }
}

Tensor prod_backward(const Tensor& g, const Tensor& x, const OpAttrs& attrs) {
  // Exact with zeros: one zero in a slice passes the product of the others to it; two or more
  // zeros make every gradient in the slice zero.
  Tensor is_zero = eq(x, 0.0);
  Tensor zeros_in_slice = expand(sum(cast(is_zero, x.dtype()), attrs.dims, true), x.shape());
  Tensor nonzero_prod = expand(prod(where(is_zero, 1.0, x), attrs.dims, true), x.shape());
  Tensor grad_full = expand_reduced(g, x, attrs);
  Tensor no_zero = nonzero_prod / where(is_zero, 1.0, x);
  Tensor one_zero = where(is_zero, nonzero_prod, zeros_like(x));
  Tensor local = where(eq(zeros_in_slice, 0.0), no_zero,
                       where(eq(zeros_in_slice, 1.0), one_zero, zeros_like(x)));
  return grad_full * local;
}

Tensor slice_backward(const Tensor& g, const Tensor& x, const OpAttrs& attrs) {
  Tensor index = arange(static_cast<double>(attrs.start), static_cast<double>(attrs.end),
                        static_cast<double>(attrs.step));
  return index_add(zeros(x.shape(), g.dtype()), attrs.dim, index, g);
}

Tensor unary_derivative(OpId op, const Tensor& x, const Tensor& g) {
  switch (op) {
    case OpId::neg: return neg(g);
    case OpId::abs: return g * sign(x);
    case OpId::exp: return g * exp(x);
    case OpId::log: return g / x;
    case OpId::log1p: return g / (x + 1.0);
    case OpId::expm1: return g * exp(x);
    case OpId::sqrt: return g / (sqrt(x) * 2.0);
    case OpId::rsqrt: return g * rsqrt(x) / x * -0.5;
    case OpId::reciprocal: return neg(g) / (x * x);
    case OpId::sin: return g * cos(x);
    case OpId::cos: return neg(g) * sin(x);
    case OpId::tanh: {
      Tensor t = tanh(x);
      return g * (1.0 - t * t);
    }
    case OpId::sigmoid: {
      Tensor s = sigmoid(x);
      return g * s * (1.0 - s);
    }
    case OpId::relu: return where(gt(x, 0.0), g, zeros_like(g));
    case OpId::silu: {
      Tensor s = sigmoid(x);
      return g * s * (1.0 + x * (1.0 - s));
    }
    case OpId::erf: return g * exp(neg(x * x)) * (2.0 / std::sqrt(std::numbers::pi));
    case OpId::gelu: {
      Tensor cdf = (erf(x * (1.0 / std::numbers::sqrt2)) + 1.0) * 0.5;
      Tensor pdf = exp(x * x * -0.5) * (1.0 / std::sqrt(2.0 * std::numbers::pi));
      return g * (cdf + x * pdf);
    }
    case OpId::gelu_tanh: {
      const double k = std::sqrt(2.0 / std::numbers::pi), c = 0.044715;
      Tensor t = tanh((x + x * x * x * c) * k);
      Tensor du = (x * x * (3.0 * c) + 1.0) * k;
      return g * ((t + 1.0) * 0.5 + x * 0.5 * (1.0 - t * t) * du);
    }
    default: break;
  }
  throw Error(fmt::format("{}: no derivative rule", op));
}

}  // namespace

Tensor derivative(OpId op, const OpAttrs& attrs, const std::vector<Tensor>& in, std::size_t i,
                  const Tensor& g) {
  if (is_unary(op)) return unary_derivative(op, in[0], g);
  switch (op) {
    case OpId::add: return g;
    case OpId::sub: return i == 0 ? g : neg(g);
    case OpId::mul: return g * in[1 - i];
    case OpId::div: return i == 0 ? g / in[1] : neg(g) * in[0] / (in[1] * in[1]);
    case OpId::pow: {
      const Tensor &a = in[0], &b = in[1];
      if (i == 0) return g * b * pow(a, b - 1.0);
      // d/db a^b = a^b log a, taken as 0 where a == 0 and b >= 0 (the limit), as PyTorch does.
      Tensor mask = logical_and(eq(a, 0.0), ge(b, 0.0));
      return where(mask, zeros_like(g), g * pow(a, b) * log(a));
    }
    case OpId::maximum:
    case OpId::minimum: {
      const Tensor &self = in[i], &other = in[1 - i];
      Tensor wins = op == OpId::maximum ? gt(self, other) : lt(self, other);
      Tensor tie = eq(self, other);
      return where(wins, g, where(tie, g * 0.5, zeros_like(g)));
    }
    case OpId::where:
      return i == 1 ? where(in[0], g, zeros_like(g)) : where(in[0], zeros_like(g), g);
    case OpId::sum: return expand_reduced(g, in[0], attrs);
    case OpId::prod: return prod_backward(g, in[0], attrs);
    case OpId::amax:
    case OpId::amin: {
      // Ties share the gradient evenly.
      const Tensor& x = in[0];
      Tensor mask = cast(eq(x, expand(reduced_keepdim(op, x, attrs), x.shape())), g.dtype());
      Tensor count = expand(sum(mask, attrs.dims, true), x.shape());
      return expand_reduced(g, x, attrs) * mask / count;
    }
    case OpId::reshape: return reshape(g, in[0].shape());
    case OpId::permute: {
      Dims inverse(attrs.dims.size());
      for (std::size_t d = 0; d < attrs.dims.size(); ++d)
        inverse[normalize_dim(attrs.dims[d], in[0].dim(), "permute")] =
            static_cast<std::int64_t>(d);
      return permute(g, inverse);
    }
    case OpId::expand: return g;  // OpNode sums it back to the input's shape
    case OpId::slice: return slice_backward(g, in[0], attrs);
    case OpId::cast:
    case OpId::copy: return g;
    case OpId::matmul:
      return i == 0 ? matmul(g, transpose(in[1], -1, -2)) : matmul(transpose(in[0], -1, -2), g);
    case OpId::gather:
      return scatter_add(zeros(in[0].shape(), g.dtype()), attrs.dim, in[1], g);
    case OpId::index_select:
      return index_add(zeros(in[0].shape(), g.dtype()), attrs.dim, in[1], g);
    case OpId::scatter_add: {
      if (i == 0) return g;
      // src positions beyond the index's extent were never scattered: their gradient is 0.
      Tensor picked = gather(g, attrs.dim, in[1]);
      Dims pads;
      for (std::int64_t d = in[2].dim(); d-- > 0;) {
        pads.push_back(0);
        pads.push_back(in[2].shape()[d] - in[1].shape()[d]);
      }
      return pad(picked, pads);
    }
    case OpId::index_add: return i == 0 ? g : index_select(g, attrs.dim, in[1]);
    case OpId::cat: {
      std::int64_t dim = normalize_dim(attrs.dim, in[0].dim(), "cat");
      std::int64_t start = 0;
      for (std::size_t k = 0; k < i; ++k) start += in[k].shape()[dim];
      return slice(g, dim, start, start + in[i].shape()[dim]);
    }
    case OpId::pad: {
      Tensor out = g;
      for (std::size_t k = 0; k < attrs.dims.size() / 2; ++k) {
        std::int64_t d = in[0].dim() - 1 - static_cast<std::int64_t>(k);
        out = slice(out, d, attrs.dims[2 * k], attrs.dims[2 * k] + in[0].shape()[d]);
      }
      return out;
    }
    default: break;
  }
  throw Error(fmt::format("{}: no derivative rule", op));
}

}  // namespace kiln::autograd

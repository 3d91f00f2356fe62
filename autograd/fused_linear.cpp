// linear and feed_forward: the library path on eager CUDA, the primitives everywhere else, and
// the autograd nodes of the library path (see fused_linear.h).
#include "autograd/fused_linear.h"

#include "autograd/autocast.h"
#include "autograd/ops.h"
#include "autograd/record.h"
#include "runtime/backend.h"
#include "runtime/grad_mode.h"
#include "runtime/trace_hooks.h"

namespace kiln {
namespace {

// The same checks on every path, so CPU, CUDA and traced calls fail alike.
void check_bias(std::string_view op, const Tensor& bias, const Tensor& weight) {
  if (!bias.defined()) return;
  const Shape& ws = weight.impl().shape;
  KILN_CHECK_AS(ShapeError, bias.dim() == 1 && bias.impl().shape[0] == ws[0],
                "{}: bias of shape {} does not match weight of shape {} (expected [{}])", op,
                shape_str(bias.impl().shape), shape_str(ws), ws[0]);
}

void check_linear(std::string_view op, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const Shape& ws = weight.impl().shape;
  KILN_CHECK_AS(ShapeError, weight.dim() == 2, "{}: weight must be 2-D, got shape {}", op,
                shape_str(ws));
  KILN_CHECK_AS(ShapeError, x.dim() >= 1 && x.impl().shape.back() == ws[1],
                "{}: input of shape {} does not match weight of shape {} (in_features {})", op,
                shape_str(x.impl().shape), shape_str(ws), ws[1]);
  check_bias(op, bias, weight);
}

Tensor apply_activation(const Tensor& x, Activation act) {
  switch (act) {
    case Activation::relu:
      return relu(x);
    case Activation::gelu_tanh:
      return gelu(x, GeluApproximation::tanh);
    default:
      return x;
  }
}

// What a trace records and what CPU tensors run: the primitives the compiled lowering matches.
Tensor composite_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation act) {
  Tensor y = matmul(x, transpose(weight, 0, 1));
  return apply_activation(bias.defined() ? add(y, bias) : y, act);
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation act) {
  KILN_OP_SCOPE;
  check_linear("linear", x, weight, bias);
  if (autocast_state().enabled) {  // f32 parameters stay the masters: cast on the fly
    auto in = autograd::autocast_inputs(AutocastPolicy::lower_precision, {x, weight, bias});
    autograd::AutocastOff off;
    return linear(in[0], in[1], in[2], act);
  }
  if (auto y = autograd::try_fused_linear(x, weight, bias, act)) return *y;
  return composite_linear(x, weight, bias, act);
}

Tensor linear_int8(const Tensor& x, const Tensor& weight, const Tensor& scale, const Tensor& bias,
                   Activation act) {
  KILN_OP_SCOPE;
  check_linear("linear_int8", x, weight, bias);
  KILN_CHECK_AS(DTypeError, weight.dtype() == DType::i8 && is_floating(x.dtype()),
                "linear_int8: takes an i8 weight and a floating input, got weight {} and input {}",
                dtype_name(weight.dtype()), dtype_name(x.dtype()));
  KILN_CHECK_AS(ShapeError, scale.dim() == 1 && scale.impl().shape[0] == weight.impl().shape[0],
                "linear_int8: scale of shape {} is not one per output channel of weight {}",
                shape_str(scale.impl().shape), shape_str(weight.impl().shape));
  Tensor y = mul(linear(x, weight.to(x.dtype())), scale);
  return apply_activation(bias.defined() ? add(y, bias) : y, act);
}

Tensor feed_forward(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2,
                    const Tensor& b2, Activation act) {
  KILN_OP_SCOPE;
  check_linear("feed_forward (first layer)", x, w1, b1);
  KILN_CHECK_AS(ShapeError, w2.dim() == 2 && w2.impl().shape[1] == w1.impl().shape[0],
                "feed_forward: second weight of shape {} does not take the first layer's {} "
                "outputs (first weight {})",
                shape_str(w2.impl().shape), w1.impl().shape[0], shape_str(w1.impl().shape));
  check_bias("feed_forward (second layer)", b2, w2);
  if (autocast_state().enabled) {
    auto in = autograd::autocast_inputs(AutocastPolicy::lower_precision, {x, w1, b1, w2, b2});
    autograd::AutocastOff off;
    return feed_forward(in[0], in[1], in[2], in[3], in[4], act);
  }
  if (auto y = autograd::try_fused_feed_forward(x, w1, b1, w2, b2, act)) return *y;
  return linear(linear(x, w1, b1, act), w2, b2);  // each layer may still be one library call
}

namespace autograd {
namespace {

// The library is a choice only for eager CUDA tensors: a trace must record the primitives.
bool library_applies(const Tensor& x, std::initializer_list<Tensor> others) {
  if (active_interceptor() || x.dim() < 2 || !x.device().is_cuda()) return false;
  for (const Tensor& t : others)
    if (t.defined() && !t.device().is_cuda()) return false;
  return true;
}

Backend& backend_of(const Tensor& t) {
  return backend_for(t.device().type);
}

std::vector<Edge> edges_of(std::initializer_list<Tensor> inputs) {
  std::vector<Edge> edges;
  for (const Tensor& t : inputs) edges.push_back(t.defined() ? gradient_edge(t) : Edge{});
  return edges;
}

// [..., n] as a [rows, n] matrix (a view when x is contiguous).
Tensor as_rows(const Tensor& t) {
  return t.reshape({-1, t.impl().shape.back()});
}

// dy * act'(z) by the activation's own derivative rule: relu's reads its output `post`, the
// GELU's its input `pre`.
Tensor activation_backward(Activation act, const Tensor& dy, const Tensor& pre,
                           const Tensor& post) {
  if (act == Activation::none) return dy;
  const OpAttrs attrs;
  const std::vector<Tensor> grads{dy};
  if (act == Activation::relu) {
    const std::vector<Tensor> values{post};
    return derivative({OpId::relu, attrs, values, values, grads, nullptr}, 0);
  }
  const std::vector<Tensor> inputs{pre}, outputs{Tensor()};
  return derivative({OpId::gelu_tanh, attrs, inputs, outputs, grads, nullptr}, 0);
}

Tensor add_defined(const Tensor& a, const Tensor& b) {
  return !a.defined() ? b : !b.defined() ? a : add(a, b);
}

// One backward GEMM on the library, or nullopt: only without grad mode (a differentiable
// backward needs the primitives' history).
std::optional<LinearBackwardResult> library_gemm(const LinearBackwardCall& call) {
  if (grad_enabled()) return std::nullopt;
  return backend_of(call.a).linear_backward(call);
}

// dW = dz^T x (and db = the column sums of dz out of the same GEMM when `want_bias`).
std::pair<Tensor, Tensor> weight_grad(const Tensor& dz, const Tensor& x, bool want_bias) {
  Tensor dz_t = transpose(as_rows(dz), 0, 1), xr = as_rows(x);
  if (auto r = library_gemm({dz_t, xr, Activation::none, {}, 0, want_bias}))
    return {r->out, r->bias_grad};
  return {matmul(dz_t, xr), want_bias ? sum(as_rows(dz), {0}) : Tensor()};
}

// dX = dz W.
Tensor input_grad(const Tensor& dz, const Tensor& weight) {
  LinearBackwardCall call;
  call.a = dz, call.b = weight;
  if (auto r = library_gemm(call)) return r->out;
  return matmul(dz, weight);
}

// The library's GEMMs read a gradient as a row- or column-major matrix; an expanded one (the
// gradient of a sum) becomes one copy rather than the generated GEMM.
Tensor packed(const Tensor& g) {
  return g.defined() && !grad_enabled() ? g.contiguous() : g;
}

}  // namespace

std::optional<Tensor> try_fused_linear(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                       Activation act) {
  if (!library_applies(x, {weight, bias})) return std::nullopt;
  const bool record = grad_enabled() && any_requires_grad({x, weight, bias});
  // ReLU's derivative reads the output itself; GELU's needs the pre-activation.
  auto r =
      backend_of(x).linear_forward({x, weight, bias, act, record && act == Activation::gelu_tanh});
  if (!r) return std::nullopt;
  if (!record) return r->out;
  auto node = std::make_shared<LinearNode>(act);
  node->set_next_edges(edges_of({x, weight, bias}));
  set_history(r->out, node, 0);  // a fresh library output: never an input, so no alias
  node->save(x, weight, r->out, r->aux);
  return r->out;
}

std::optional<Tensor> try_fused_feed_forward(const Tensor& x, const Tensor& w1, const Tensor& b1,
                                             const Tensor& w2, const Tensor& b2, Activation act) {
  if (!library_applies(x, {w1, b1, w2, b2})) return std::nullopt;
  const bool record = grad_enabled() && any_requires_grad({x, w1, b1, w2, b2});
  const bool through_hidden = record && any_requires_grad({x, w1, b1});
  Backend& backend = backend_of(x);
  auto first = backend.linear_forward({x, w1, b1, act, through_hidden && act != Activation::none});
  if (!first) return std::nullopt;
  Tensor hidden = first->out;
  auto second = backend.linear_forward({hidden, w2, b2, Activation::none, false});
  if (!second) {
    // The first call is done: give it its own node and finish with the primitives.
    if (through_hidden) {
      auto node = std::make_shared<LinearNode>(act);
      node->set_next_edges(edges_of({x, w1, b1}));
      set_history(hidden, node, 0);
      node->save(x, w1, hidden, act == Activation::gelu_tanh ? first->aux : Tensor());
    }
    return composite_linear(hidden, w2, b2, Activation::none);
  }
  if (!record) return second->out;
  auto node = std::make_shared<FeedForwardNode>(act);
  node->set_next_edges(edges_of({x, w1, b1, w2, b2}));
  set_history(second->out, node, 0);
  node->save(x, w1, w2, hidden, first->aux, first->aux_ld);
  return second->out;
}

// ---- LinearNode ----

LinearNode::LinearNode(Activation act) : Node(act == Activation::gelu_tanh ? 2 : 1), act_(act) {}

void LinearNode::save(const Tensor& x, const Tensor& weight, const Tensor& out, const Tensor& pre) {
  x_ = SavedTensor::input(x, needs_grad(1));
  weight_ = SavedTensor::input(weight, needs_grad(0));
  if (act_ == Activation::relu) out_ = SavedTensor::output(out, 0, true);
  if (act_ == Activation::gelu_tanh) pre_ = SavedTensor::output(pre, 1, true);
}

std::vector<Tensor> LinearNode::backward(const std::vector<Tensor>& grad_outputs) {
  const Tensor& dy = grad_outputs.at(0);
  Tensor dz = dy.defined() ? activation_backward(act_, dy, pre_.unpack(*this), out_.unpack(*this))
                           : Tensor();
  // Under a second backward, gradients of z itself (read by the first backward) arrive too.
  if (grad_outputs.size() > 1) dz = add_defined(dz, grad_outputs[1]);
  std::vector<Tensor> grads(3);
  if (!dz.defined()) return grads;
  dz = packed(dz);
  if (needs_grad(1))
    std::tie(grads[1], grads[2]) = weight_grad(dz, x_.unpack(*this), needs_grad(2));
  if (needs_grad(2) && !grads[2].defined()) grads[2] = sum(as_rows(dz), {0});
  if (needs_grad(0)) grads[0] = input_grad(dz, weight_.unpack(*this));
  return grads;
}

void LinearNode::release_saved() {
  for (SavedTensor* s : {&x_, &weight_, &out_, &pre_}) s->release();
}

// ---- FeedForwardNode ----

FeedForwardNode::FeedForwardNode(Activation act) : Node(3), act_(act) {}

void FeedForwardNode::save(const Tensor& x, const Tensor& w1, const Tensor& w2,
                           const Tensor& hidden, const Tensor& aux, std::int64_t aux_ld) {
  const bool through = needs_hidden_grad();
  x_ = SavedTensor::input(x, needs_grad(1));
  w1_ = SavedTensor::input(w1, needs_grad(0));
  w2_ = SavedTensor::input(w2, through);
  // h feeds dW2, and relu's derivative when the library's bitmask cannot be used.
  hidden_ = SavedTensor::output(hidden, 1, needs_grad(3) || (through && act_ == Activation::relu));
  if (!through) return;
  if (act_ == Activation::gelu_tanh) pre_ = SavedTensor::output(aux, 2, true);
  if (act_ == Activation::relu) relu_mask_ = aux;
  aux_ld_ = aux_ld;
}

std::vector<Tensor> FeedForwardNode::backward(const std::vector<Tensor>& grad_outputs) {
  const Tensor dy = packed(grad_outputs.at(0));
  const Tensor& d_hidden = grad_outputs.at(1);  // second-order gradients of h and z1
  const Tensor& d_pre = grad_outputs.at(2);
  std::vector<Tensor> grads(5);
  const Tensor hidden = hidden_.unpack(*this);
  if (dy.defined() && needs_grad(3))
    std::tie(grads[3], grads[4]) = weight_grad(dy, hidden, needs_grad(4));
  if (dy.defined() && needs_grad(4) && !grads[4].defined()) grads[4] = sum(as_rows(dy), {0});
  if (!needs_hidden_grad()) return grads;

  // dz1 = (dy W2 + dh) * act'(z1) + dz1', with db1 out of the same GEMM when it can be.
  const Tensor w2 = w2_.unpack(*this), pre = pre_.unpack(*this);
  Tensor dz, db;
  if (dy.defined() && !d_hidden.defined()) {
    const bool fused_bias = needs_grad(2) && act_ != Activation::none && !d_pre.defined();
    const Tensor& aux = act_ == Activation::relu ? relu_mask_ : pre;
    if (auto r = library_gemm({dy, w2, act_, aux, aux_ld_, fused_bias}))
      dz = r->out, db = r->bias_grad;
  }
  if (!dz.defined()) {
    Tensor dh = add_defined(dy.defined() ? matmul(dy, w2) : Tensor(), d_hidden);
    if (dh.defined()) dz = activation_backward(act_, dh, pre, hidden);
  }
  dz = packed(add_defined(dz, d_pre));
  if (!dz.defined()) return grads;
  if (needs_grad(1))
    std::tie(grads[1], grads[2]) =
        weight_grad(dz, x_.unpack(*this), needs_grad(2) && !db.defined());
  if (needs_grad(2)) {
    if (db.defined()) grads[2] = db;
    if (!grads[2].defined()) grads[2] = sum(as_rows(dz), {0});
  }
  if (needs_grad(0)) grads[0] = input_grad(dz, w1_.unpack(*this));
  return grads;
}

void FeedForwardNode::release_saved() {
  for (SavedTensor* s : {&x_, &w1_, &w2_, &hidden_, &pre_}) s->release();
  relu_mask_ = Tensor();
}

}  // namespace autograd
}  // namespace kiln

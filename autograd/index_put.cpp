// torch.index_put (self[indices] = values): a composite of index_add and where over self with
// its indexed dims flattened to one, so that it fuses, traces and differentiates through those
// ops' rules. A bool mask index becomes a where.
#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "autograd/ops.h"
#include "runtime/trace_hooks.h"

namespace kiln {

namespace {

std::string indices_str(const std::vector<Tensor>& indices) {
  std::vector<std::string> parts;
  for (const Tensor& i : indices)
    parts.push_back(i.defined() ? fmt::format("{} {}", i.dtype(), shape_str(i.impl().shape))
                                : std::string(":"));
  return fmt::format("({})", fmt::join(parts, ", "));
}

// Numpy broadcasting of `from` to `to`, one way.
bool broadcasts_to(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  std::size_t lead = to.size() - from.size();
  for (std::size_t i = 0; i < from.size(); ++i)
    if (from[i] != 1 && from[i] != to[lead + i]) return false;
  return true;
}

Tensor scalar_on(Scalar value, DType dtype, Device device) {
  Tensor s = scalar_tensor(value, dtype);
  return device.is_cpu() ? s : s.to(device);
}

SymShape sizes_of(const Tensor& t, const Dims& dims) {
  SymShape s;
  for (std::int64_t d : dims) s.push_back(t.size(d));
  return s;
}

// Where the data is at hand (a CPU index, not tracing), an out-of-range value is named here;
// elsewhere the linear index's sentinel makes index_add report it.
void check_range(const Tensor& index, std::int64_t dim, const Tensor& self) {
  if (active_interceptor() || !index.device().is_cpu()) return;
  std::int64_t size = self.impl().shape[dim];
  for (std::int64_t v : index.to_vector<std::int64_t>())
    KILN_CHECK_AS(IndexError, v >= -size && v < size,
                  "index_put: index {} is out of range for dim {} of size {} (self of shape {})", v,
                  dim, size, shape_str(self.impl().shape));
}

// The row-major linear index over self's dims `dims` of the (broadcast) index tensors, negative
// values wrapped; a position with a value out of range gets `numel` of those dims, which
// index_add rejects (on CUDA through its device check).
Tensor linear_index(const Tensor& self, const std::vector<Tensor>& indices, const Dims& dims) {
  Tensor linear, bad;
  std::int64_t total = 1;
  for (std::int64_t d : dims) {
    std::int64_t size = self.impl().shape[d];
    Tensor i = indices[d].to(DType::i64);
    if (i.device() != self.device()) i = i.to(self.device());
    i = where(lt(i, 0), add(i, size), i);
    Tensor out = logical_or(lt(i, 0), ge(i, size));
    bad = bad.defined() ? logical_or(bad, out) : out;
    linear = linear.defined() ? add(mul(linear, size), i) : i;
    total *= size;
  }
  return where(bad, scalar_on(total, DType::i64, self.device()), linear);
}

// flat [P, ...] with the rows at `linear` ([N]) replaced by `v` ([N, ...], or [1, ...] when
// `uniform`: the same for every index). A row indexed more than once gets the mean of its values
// (PyTorch leaves which one lands undefined): equal values land as they are.
Tensor overwrite(const Tensor& flat, const Tensor& linear, const Tensor& v, bool uniform) {
  DType dt = flat.dtype();
  Device dev = flat.device();
  SymInt rows = flat.size(0), n = linear.size(0);
  Tensor count = index_add(expand(scalar_on(0, dt, dev), {rows}), 0, linear,
                           expand(scalar_on(1, dt, dev), {n}));
  SymShape column(static_cast<std::size_t>(flat.dim()), SymInt(1));
  column[0] = rows;
  Tensor written = reshape(dt == DType::bool_ ? count : gt(count, 0), column);
  if (uniform) return where(written, v, flat);
  Tensor placed = index_add(expand(scalar_on(0, dt, dev), flat.sym_shape()), 0, linear, v);
  if (dt != DType::bool_) {
    Tensor divisor = reshape(clamp_min(count, 1), column);
    placed = is_floating(dt) ? div(placed, divisor) : floor_divide(placed, divisor);
  }
  return where(written, placed, flat);
}

// indices = {mask} with mask of self's leading shape: a where, when values do not need the
// number of true elements (data-dependent); else, eagerly, the mask's positions as indices.
Tensor put_masked(const Tensor& self, const Tensor& mask, const Tensor& values, bool accumulate) {
  const Shape& shape = self.impl().shape;
  auto k = static_cast<std::size_t>(mask.dim());
  KILN_CHECK_AS(
      ShapeError, k <= shape.size() && Shape(shape.begin(), shape.begin() + k) == mask.impl().shape,
      "index_put: a bool mask of shape {} must match the leading dims of self of shape {}",
      shape_str(mask.impl().shape), shape_str(shape));
  Shape rest(shape.begin() + k, shape.end());
  if (broadcasts_to(values.impl().shape, rest)) {
    Shape column = mask.impl().shape;
    column.resize(shape.size(), 1);
    Tensor m = reshape(mask.device() == self.device() ? mask : mask.to(self.device()), column);
    return accumulate ? add(self, where(m, values, scalar_on(0, self.dtype(), self.device())))
                      : where(m, values, self);
  }
  KILN_CHECK_AS(ShapeError, !active_interceptor(),
                "index_put: inside a compiled function a bool mask index takes values that "
                "broadcast to {} (self {} past the mask), not {}: the number of true elements "
                "is data-dependent",
                shape_str(rest), shape_str(shape), shape_str(values.impl().shape));
  std::vector<bool> on = mask.to_vector<bool>();
  std::vector<std::vector<std::int64_t>> at(k);
  for (std::int64_t p = 0; p < static_cast<std::int64_t>(on.size()); ++p) {
    if (!on[p]) continue;
    std::int64_t q = p;
    for (std::size_t d = k; d-- > 0;) {
      at[d].push_back(q % shape[d]);
      q /= shape[d];
    }
  }
  std::vector<Tensor> indices;
  for (std::size_t d = 0; d < k; ++d) indices.push_back(from_vector(at[d]));
  return index_put(self, indices, values, accumulate);
}

// Checks what only the indices decide and returns their broadcast shape.
Shape check_indices(const Tensor& self, const std::vector<Tensor>& indices, const Dims& dims) {
  Shape b;
  for (std::int64_t d : dims) {
    const Tensor& i = indices[d];
    KILN_CHECK_AS(DTypeError, is_integral(i.dtype()),
                  "index_put: index {} has dtype {}; indices must be i64 or i32 tensors, or one "
                  "bool mask (indices {})",
                  d, i.dtype(), indices_str(indices));
    const Shape& s = i.impl().shape;
    Shape wide = s.size() > b.size() ? s : b, narrow = s.size() > b.size() ? b : s;
    for (std::size_t j = 0; j < narrow.size(); ++j) {
      std::int64_t& w = wide[wide.size() - narrow.size() + j];
      std::int64_t o = narrow[j];
      KILN_CHECK_AS(ShapeError, w == o || w == 1 || o == 1,
                    "index_put: indices {} do not broadcast together (self of shape {})",
                    indices_str(indices), shape_str(self.impl().shape));
      if (w == 1) w = o;
    }
    b = wide;
    check_range(i, d, self);
  }
  return b;
}

}  // namespace

Tensor index_put(const Tensor& self, const std::vector<Tensor>& indices, const Tensor& values,
                 bool accumulate) {
  KILN_OP_SCOPE;
  const Shape& shape = self.impl().shape;
  KILN_CHECK_AS(IndexError, !indices.empty() && indices.size() <= shape.size(),
                "index_put: {} indices {} for self of shape {} (want 1 to {})", indices.size(),
                indices_str(indices), shape_str(shape), shape.size());
  KILN_CHECK_AS(DTypeError, values.dtype() == self.dtype(),
                "index_put: values ({}) must have self's dtype ({})", values.dtype(), self.dtype());
  KILN_CHECK_AS(DTypeError, !accumulate || self.dtype() != DType::bool_,
                "index_put: accumulate=true needs a numeric self, not bool");
  if (indices[0].defined() && indices[0].dtype() == DType::bool_) {
    KILN_CHECK_AS(IndexError, indices.size() == 1,
                  "index_put: a bool mask index must be the only index, got {}",
                  indices_str(indices));
    return put_masked(self, indices[0], values, accumulate);
  }
  // Dims indexed by a tensor (`dims`) and sliced in full (`sliced`) up to the last indexed one.
  Dims dims, sliced, rest;
  for (std::int64_t d = 0; d < static_cast<std::int64_t>(indices.size()); ++d)
    if (indices[d].defined()) dims.push_back(d);
  KILN_CHECK_AS(IndexError, !dims.empty(), "index_put: indices {} hold no index tensor",
                indices_str(indices));
  for (std::int64_t d = 0; d < dims.back(); ++d)
    if (!indices[d].defined()) sliced.push_back(d);
  for (std::int64_t d = dims.back() + 1; d < self.dim(); ++d) rest.push_back(d);
  Shape b = check_indices(self, indices, dims);
  // The indexed shape, as PyTorch lays it out: adjacent index tensors put the broadcast dims b
  // where they are (after the `lead` slices), separated ones put them first. The work below
  // always has b first: self's indexed dims and the values' b dims are moved to the front.
  bool adjacent = dims.back() - dims.front() + 1 == static_cast<std::int64_t>(dims.size());
  auto lead = static_cast<std::int64_t>(adjacent ? sliced.size() : 0);
  SymShape torch_shape = sizes_of(self, Dims(sliced.begin(), sliced.begin() + lead));
  Tensor linear = linear_index(self, indices, dims);  // of shape b
  SymShape b_sym = linear.sym_shape();
  torch_shape.insert(torch_shape.end(), b_sym.begin(), b_sym.end());
  SymShape after = sizes_of(self, Dims(sliced.begin() + lead, sliced.end()));
  SymShape rest_sizes = sizes_of(self, rest);
  after.insert(after.end(), rest_sizes.begin(), rest_sizes.end());
  torch_shape.insert(torch_shape.end(), after.begin(), after.end());
  KILN_CHECK_AS(ShapeError, broadcasts_to(values.impl().shape, torch_shape.traced_values()),
                "index_put: values of shape {} do not broadcast to the indexed shape {} (self of "
                "shape {}, indices {})",
                shape_str(values.impl().shape), shape_str(torch_shape.traced_values()),
                shape_str(shape), indices_str(indices));

  // Self as [P, sliced..., rest...]: its indexed dims moved to the front and flattened.
  Dims order = dims;
  order.insert(order.end(), sliced.begin(), sliced.end());
  order.insert(order.end(), rest.begin(), rest.end());
  bool moved = !std::is_sorted(order.begin(), order.end());
  SymShape moved_shape = sizes_of(self, order);
  SymInt rows = 1;
  for (std::size_t j = 0; j < dims.size(); ++j) rows *= moved_shape[j];
  SymShape tail(moved_shape.begin() + static_cast<std::ptrdiff_t>(dims.size()), moved_shape.end());
  SymShape flat_shape{rows};
  flat_shape.insert(flat_shape.end(), tail.begin(), tail.end());
  Tensor flat = reshape(moved ? permute(self, order) : self, flat_shape);
  Tensor lin = reshape(linear, {-1});

  // Values as [N, sliced..., rest...], or [1, ...] when they do not vary along b's dims.
  auto nb = static_cast<std::int64_t>(b.size());
  Shape vshape = values.impl().shape;
  vshape.insert(vshape.begin(), torch_shape.size() - vshape.size(), 1);
  bool uniform = !accumulate && numel(b) > 0 &&
                 std::all_of(vshape.begin() + lead, vshape.begin() + lead + nb,
                             [](std::int64_t s) { return s == 1; });
  Tensor v = expand(values, torch_shape);
  if (lead > 0) {  // b's dims first, as in flat
    Dims to_front(static_cast<std::size_t>(v.dim()));
    std::iota(to_front.begin(), to_front.end(), 0);
    std::rotate(to_front.begin(), to_front.begin() + lead, to_front.begin() + lead + nb);
    v = permute(v, to_front);
  }
  if (uniform)
    for (std::int64_t j = 0; j < nb; ++j) v = slice(v, j, 0, 1);
  SymShape v_shape{uniform ? SymInt(1) : lin.size(0)};
  v_shape.insert(v_shape.end(), tail.begin(), tail.end());
  v = reshape(v, v_shape);

  Tensor put = accumulate ? index_add(flat, 0, lin, v) : overwrite(flat, lin, v, uniform);
  if (!moved) return reshape(put, self.sym_shape());
  Dims inverse(order.size());
  for (std::size_t j = 0; j < order.size(); ++j) inverse[order[j]] = static_cast<std::int64_t>(j);
  return permute(reshape(put, moved_shape), inverse);
}

}  // namespace kiln

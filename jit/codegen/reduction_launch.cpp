// Launching reduction kernels (see reduction.h): the index struct, the outputs, the schedule of
// the call (reduction_schedule.h) and the variant it names, the two-stage scratch buffers, and the
// device check of a row select.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <optional>

#include "jit/codegen/kernel_cache.h"
#include "jit/codegen/kernel_values.h"
#include "jit/codegen/launch_stats.h"
#include "jit/codegen/pointwise_layout.h"
#include "jit/codegen/reduction.h"
#include "runtime/device_checks.h"
#include "runtime/error.h"
#include "runtime/log.h"

namespace kiln::jit::codegen {
namespace {

// The index struct the kernels declare, into `sc.packed`: sizes split into kept and reduced dims,
// then per read its strides likewise, then the outputs' (contiguous over the domain). Each read's
// domain strides stay in `sc.strides` (a row of `rank` per read; one row of zeros for none), and
// its pointer in `sc.pointers`.
void pack_index(const ReductionKernel& kernel, const Shape& domain,
                const std::vector<Tensor>& values, LaunchScratch& sc) {
  const auto rank = static_cast<int>(domain.size());
  const std::vector<int>& kept = sc.kept;
  const std::vector<int>& reduced = sc.reduced;
  std::size_t nk = std::max<std::size_t>(1, kept.size()),
              nr = std::max<std::size_t>(1, reduced.size());
  auto split = [&](const auto& over_domain, const std::vector<int>& dims, std::size_t width,
                   long long pad) {
    for (std::size_t i = 0; i < width; ++i)
      sc.packed.push_back(i < dims.size() ? over_domain[dims[i]] : pad);
  };
  split(domain, kept, nk, 1);
  split(domain, reduced, nr, 1);
  sc.strides.assign(std::max<std::size_t>(1, kernel.reads.size()) * rank, 0);
  for (std::size_t i = 0; i < kernel.reads.size(); ++i) {
    const auto& r = kernel.reads[i];
    const Tensor& t = values.at(r.value);
    KILN_CHECK(t.device().type == Device::Type::cuda,
               "codegen: kernel '{}' reads %{} on {}, not a CUDA device", kernel.name, r.value,
               t.device().str());
    domain_strides_into(t, r.frame_dims, std::span(sc.strides).subspan(i * rank, rank));
    sc.pointers.push_back(reinterpret_cast<cuda::DevicePtr>(t.raw_data()));
  }
  const std::size_t rows_of_strides = std::max<std::size_t>(1, kernel.reads.size());
  for (std::size_t i = 0; i < rows_of_strides; ++i)
    split(std::span(sc.strides).subspan(i * rank, rank), kept, nk, 0);
  for (std::size_t i = 0; i < rows_of_strides; ++i)
    split(std::span(sc.strides).subspan(i * rank, rank), reduced, nr, 0);
  sc.out_strides.assign(std::max(1, rank), 1);
  for (int d = rank - 2; d >= 0; --d)
    sc.out_strides[d] = sc.out_strides[d + 1] * std::max<long long>(1, domain[d + 1]);
  split(sc.out_strides, kept, nk, 0);
  split(sc.out_strides, reduced, nr, 0);
}

// The written values: full ones over the domain, reduced ones one per row (keepdim or not).
std::vector<Tensor> allocate_outputs(const graph::Graph& g, const ReductionKernel& kernel,
                                     const Shape& domain, const LaunchScratch& sc,
                                     OutputBuffers into) {
  const auto rank = static_cast<int>(domain.size());
  std::vector<Tensor> outs;
  outs.reserve(kernel.writes.size());
  for (std::size_t i = 0; i < kernel.writes.size(); ++i) {
    const auto& meta = g.values[kernel.writes[i]].meta;
    Shape shape;
    if (kernel.write_full[i])
      shape = domain;
    else if (static_cast<int>(meta.shape.size()) == rank)
      for (int d = 0; d < rank; ++d)
        shape.push_back(
            std::find(sc.reduced.begin(), sc.reduced.end(), d) == sc.reduced.end() ? domain[d] : 1);
    else
      for (int d : sc.kept) shape.push_back(domain[d]);
    outs.push_back(empty_in(output_buffer(into, i), std::move(shape), meta.dtype, Device::cuda()));
  }
  return outs;
}

TensorAccess access_of(const Tensor& t) {
  return {reinterpret_cast<std::uintptr_t>(t.raw_data()), itemsize(t.dtype())};
}

// The handle of the variant `s` names, rendered on its first launch; KILN_LOG=kernels says
// which schedule the first launch of each variant took and why.
const KernelHandle& variant_for(const ReductionKernel& kernel, const ReductionSchedule& s,
                                const ReductionGeometry& call, long long sm_count,
                                const ScheduleLimits& limits) {
  const int slot = s.variant.index();
  const KernelHandle& handle = kernel.variants.get(
      slot, [&] { return KernelHandle(kernel.name, render_reduction_variant(kernel, s.variant)); });
  if (log_enabled(LogTopic::kernels) && kernel.variants.first_launch(slot)) {
    std::vector<std::string> why;
    schedule_reduction(kernel, call, sm_count, limits, &why);
    log_line(fmt::format("kiln: kernel {}: schedule {} for {} rows of {} columns ({})", kernel.name,
                         s.str(), call.rows, call.cols, fmt::join(why, "; ")));
  }
  return handle;
}

}  // namespace

std::vector<Tensor> run_reduction(const graph::Graph& g, const ReductionKernel& kernel,
                                  const Shape& domain, std::vector<Tensor>& values,
                                  std::span<const std::int64_t> symbol_values, OutputBuffers into) {
  apply_host_views(g, kernel.host_views, values, symbol_values);
  LaunchScratch::Lease lease;
  LaunchScratch& sc = lease.scratch();
  const auto rank = static_cast<int>(domain.size());
  sc.reduced.assign(kernel.reduce_dims.begin(), kernel.reduce_dims.end());
  for (int d = 0; d < rank; ++d)
    if (std::find(sc.reduced.begin(), sc.reduced.end(), d) == sc.reduced.end())
      sc.kept.push_back(d);
  long long rows = 1, cols = 1;
  for (int d : sc.kept) rows *= domain[d];
  for (int d : sc.reduced) cols *= domain[d];
  pack_index(kernel, domain, values, sc);
  for (int v : kernel.scalars) sc.numbers.push_back(number_argument(values.at(v)));
  std::vector<Tensor> outs = allocate_outputs(g, kernel, domain, sc, into);

  for (const auto& r : kernel.reads) sc.read_access.push_back(access_of(values.at(r.value)));
  for (const Tensor& o : outs) sc.write_access.push_back(access_of(o));
  const ReductionGeometry call{domain,     sc.kept,        sc.reduced,     rows,           cols,
                               sc.strides, sc.out_strides, sc.read_access, sc.write_access};
  const ScheduleLimits& limits = schedule_limits();
  const long long sms = cuda::backend().properties(0).sm_count;
  const ReductionSchedule s = schedule_reduction(kernel, call, sms, limits);

  for (const Tensor& o : outs)
    sc.pointers.push_back(reinterpret_cast<cuda::DevicePtr>(o.raw_data()));
  std::vector<void*>& params = sc.params;
  const std::size_t first_write = kernel.reads.size();
  for (std::size_t i = 0; i < first_write; ++i) params.push_back(&sc.pointers[i]);
  for (auto& number : sc.numbers) params.push_back(number.data());
  for (std::size_t i = first_write; i < sc.pointers.size(); ++i) params.push_back(&sc.pointers[i]);
  // A row select's out-of-range index: [flag, index], set by the kernel (device_checks.h).
  std::optional<DeviceCheck> check;
  cuda::DevicePtr error_ptr = 0;
  if (kernel.checks_index) {
    check = reserve_device_check([dim = sc.reduced.at(0), cols](std::span<const std::int64_t> e) {
      throw IndexError(fmt::format("gather: index {} is out of range for dim {} of size {}{}", e[1],
                                   dim, cols, device_check_note()));
    });
    error_ptr = check->flag();
    params.push_back(&error_ptr);
  }
  Tensor partials, arrivals;
  cuda::DevicePtr partials_ptr = 0, arrivals_ptr = 0;
  if (kernel.splittable) {
    // Only a split row touches them (the kernel's second stage runs when splits > 1).
    if (s.splits > 1) {
      partials = empty({rows * s.splits * kernel.partial_slots}, DType::i64, Device::cuda());
      arrivals = zeros({rows}, DType::i32, Device::cuda());
      partials_ptr = reinterpret_cast<cuda::DevicePtr>(partials.raw_data());
      arrivals_ptr = reinterpret_cast<cuda::DevicePtr>(arrivals.raw_data());
    }
    params.push_back(&partials_ptr);
    params.push_back(&arrivals_ptr);
  }
  long long splits = s.splits, chunk_cols = s.chunk_cols;
  params.push_back(sc.packed.data());
  params.push_back(&rows);
  params.push_back(&cols);
  params.push_back(&splits);
  params.push_back(&chunk_cols);
  if (rows == 0) return outs;
  std::int64_t read = 0, written = 0;
  for (const auto& r : kernel.reads)
    read += tensor_bytes(values.at(r.value)) * (r.on_chip && s.on_chip ? 1 : r.passes);
  for (const auto& o : outs) written += tensor_bytes(o);
  const KernelHandle& handle = variant_for(kernel, s, call, sms, limits);
  ++launch_stats().reduction_variants[s.variant.index()];
  handle.launch({s.grid_x, s.grid_y, 1}, {s.block_x, s.block_y, 1}, params.data(), read, written);
  if (check) check->launched();
  return outs;
}

}  // namespace kiln::jit::codegen

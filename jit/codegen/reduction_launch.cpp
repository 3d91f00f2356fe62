// Launching reduction kernels (see reduction.h): the schedule (a block or a warp per row, or the
// outer schedule), the index struct, the block size, how many blocks a row is split over, the
// two-stage scratch buffers, and the device check of a row select.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <optional>

#include "jit/codegen/kernel_cache.h"
#include "jit/codegen/kernel_values.h"
#include "jit/codegen/pointwise_layout.h"
#include "jit/codegen/reduction.h"
#include "runtime/device_checks.h"
#include "runtime/error.h"

namespace kiln::jit::codegen {

long long split_count(long long rows, long long cols, unsigned block, long long sm_count) {
  if (rows >= sm_count) return 1;  // enough rows to fill the device
  // >= 32 columns per thread: a chunk's block tree, second stage and index arithmetic are paid
  // per thread (~150 issue slots: at 16 bf16 columns, more than the columns' own work).
  long long by_work = cols / (static_cast<long long>(block) * 32);
  // One wave, a block per SM: more blocks would pay those again for no more bandwidth.
  long long by_device = (sm_count + rows - 1) / std::max(1LL, rows);
  return std::max(1LL, std::min(by_work, by_device));
}

namespace {

// Rows of the outer schedule's block; its x is one warp of neighbouring rows.
constexpr unsigned kOuterBlockY = 8;

// The outer schedule when the kernel has one, its rows are wide enough to fill a sector
// (8 elements), and no read is contiguous along the reduced dims instead (a transposed view:
// the row schedule's lanes read that one side by side).
// `read_strides` holds a row of domain strides per read.
bool use_outer_schedule(const ReductionKernel& kernel, const Shape& domain,
                        const std::vector<int>& kept, const std::vector<int>& reduced,
                        std::span<const long long> read_strides) {
  if (kernel.outer_source.empty() || kept.empty() || reduced.empty()) return false;
  if (domain[kept.back()] < 8) return false;
  bool side_by_side = false;
  const std::size_t rank = domain.size();
  for (std::size_t at = 0; at + rank <= read_strides.size(); at += rank) {
    const long long* s = read_strides.data() + at;
    if (s[reduced.back()] == 1) return false;
    side_by_side = side_by_side || s[kept.back()] == 1;
  }
  return side_by_side;
}

// Whether the outer schedule may take `width` neighbouring rows a lane (its vector form): every
// read steps 1 along the innermost kept dim, whose size the width divides, its other strides are
// multiples of the width and its base is 16-byte aligned.
bool outer_vectors_fit(const ReductionKernel& kernel, const Shape& domain,
                       const std::vector<int>& kept, std::span<const long long> read_strides,
                       const std::vector<Tensor>& values) {
  const long long width = kernel.outer_width;
  if (kernel.outer_vector_source.empty() || width < 2 || domain[kept.back()] % width != 0)
    return false;
  const std::size_t rank = domain.size();
  for (std::size_t i = 0; i < kernel.reads.size(); ++i) {
    const long long* s = read_strides.data() + i * rank;
    if (s[kept.back()] != 1) return false;
    for (std::size_t d = 0; d < rank; ++d)
      if (static_cast<int>(d) != kept.back() && domain[d] != 1 && s[d] % width != 0) return false;
    if (reinterpret_cast<std::uintptr_t>(values.at(kernel.reads[i].value).raw_data()) % 16 != 0)
      return false;
  }
  return true;
}

// Threads of a warp-per-row block: 8 rows at a time.
constexpr unsigned kWarpRowBlock = 256;

std::atomic<int>& layout_limit() {
  static std::atomic<int> limit{static_cast<int>(ReductionLayout::vector)};
  return limit;
}

thread_local ReductionLayout last_layout = ReductionLayout::generic;

// The contiguous layouts' column arithmetic is `int`: a row's last column plus a block's stride
// (at most 1024 threads x 16 columns) stays below 2^31.
std::atomic<std::int64_t>& index_limit() {
  static std::atomic<std::int64_t> limit{kIndexLimit - 1024 * 16};
  return limit;
}

// Whether `strides` step through the reduced dims as one contiguous run (innermost stride 1).
bool contiguous_over(const Shape& domain, const std::vector<int>& reduced,
                     const long long* strides) {
  long long expected = 1;
  for (auto d = reduced.rbegin(); d != reduced.rend(); ++d) {
    if (domain[*d] != 1 && strides[*d] != expected) return false;
    expected *= domain[*d];
  }
  return true;
}

// The layout of a launch (ReductionLayout): `read_strides` holds a row of domain strides per
// read, `out_strides` the outputs' (contiguous over the domain).
ReductionLayout choose_layout(const ReductionKernel& kernel, const Shape& domain,
                              const std::vector<int>& kept, const std::vector<int>& reduced,
                              long long cols, std::span<const long long> read_strides,
                              std::span<const long long> out_strides,
                              const std::vector<Tensor>& values, const std::vector<Tensor>& outs) {
  auto most = static_cast<ReductionLayout>(layout_limit().load());
  const long long limit = index_limit().load();
  if (most == ReductionLayout::generic || reduced.empty() || cols > limit)
    return ReductionLayout::generic;
  const std::size_t rank = domain.size();
  // Their row bases are one 32 x 32 -> 64-bit multiply (mul.wide.s32): row and kept strides fit.
  long long rows = 1;
  for (int d : kept) rows *= domain[d];
  auto wide_stride = [&](const long long* s) {
    for (int d : kept)
      if (s[d] > limit || s[d] < -limit) return true;
    return false;
  };
  if (rows > limit || wide_stride(out_strides.data())) return ReductionLayout::generic;
  for (std::size_t i = 0; i < kernel.reads.size(); ++i)
    if (kernel.reads[i].frame_dims.size() == rank && wide_stride(read_strides.data() + i * rank))
      return ReductionLayout::generic;
  IterSpace rows_by_cols;  // plan_vectors' view: the kept dims, then the row as one dim
  for (int d : kept) rows_by_cols.sizes.push_back(domain[d]);
  rows_by_cols.sizes.push_back(cols);
  std::vector<TensorAccess> reads, writes;
  for (std::size_t i = 0; i < kernel.reads.size(); ++i) {
    if (kernel.reads[i].frame_dims.size() != rank) continue;  // read once per row
    const long long* s = read_strides.data() + i * rank;
    if (!contiguous_over(domain, reduced, s)) return ReductionLayout::generic;
    auto& strides = rows_by_cols.strides.emplace_back();
    for (int d : kept) strides.push_back(s[d]);
    strides.push_back(1);
    const Tensor& t = values.at(kernel.reads[i].value);
    reads.push_back({reinterpret_cast<std::uintptr_t>(t.raw_data()), itemsize(t.dtype())});
  }
  for (std::size_t i = 0; i < outs.size(); ++i) {
    if (!kernel.write_full[i]) continue;
    if (!contiguous_over(domain, reduced, out_strides.data())) return ReductionLayout::generic;
    writes.push_back(
        {reinterpret_cast<std::uintptr_t>(outs[i].raw_data()), itemsize(outs[i].dtype())});
  }
  if (most == ReductionLayout::flat || kernel.vector < 2 || cols % kernel.vector != 0)
    return ReductionLayout::flat;
  // The pointwise path's check over [kept..., cols]: every read contiguous along the row and
  // aligned for a vector, its row strides multiples of the width; every write aligned.
  return plan_vectors(rows_by_cols, kernel.vector, reads, writes) > 0 ? ReductionLayout::vector
                                                                      : ReductionLayout::flat;
}

}  // namespace

ReductionLayout set_reduction_layout_limit(ReductionLayout most) {
  return static_cast<ReductionLayout>(layout_limit().exchange(static_cast<int>(most)));
}

std::int64_t set_reduction_index_limit(std::int64_t limit) {
  return index_limit().exchange(limit);
}

ReductionLayout last_reduction_layout() {
  return last_layout;
}

int warp_row_lanes(std::int64_t cols, std::size_t widest) {
  return widest <= 2 && cols > 512 ? 16 : 32;
}

ReductionSchedule row_schedule(const ReductionKernel& k, long long cols, long long splits) {
  return splits == 1 && cols <= kWarpRowMaxCols && !k.warp_source.empty()
             ? ReductionSchedule::warp_per_row
             : ReductionSchedule::block_per_row;
}

int reduction_variant(ReductionSchedule schedule, ReductionLayout layout) {
  switch (schedule) {
    case ReductionSchedule::block_per_row:
      return static_cast<int>(layout);
    case ReductionSchedule::warp_per_row:
      return 3 + static_cast<int>(layout);
    case ReductionSchedule::outer:
      return 6;
    case ReductionSchedule::outer_vector:
      break;
  }
  return 7;
}

const std::string& variant_source(const ReductionKernel& k, int variant) {
  switch (variant) {
    case 0:
      return k.source;
    case 1:
    case 2:
      return k.contiguous_sources.at(variant - 1);
    case 3:
      return k.warp_source;
    case 4:
    case 5:
      return k.warp_contiguous_sources.at(variant - 4);
    case 6:
      return k.outer_source;
    default:
      break;
  }
  return k.outer_vector_source;
}

int expected_variant(const ReductionKernel& k) {
  if (k.outer_vector_expected) return reduction_variant(ReductionSchedule::outer_vector, {});
  if (!k.outer_source.empty()) return reduction_variant(ReductionSchedule::outer, {});
  // Contiguous inputs at the traced sizes: the vector layout where whole vectors fill the row,
  // the generic one where rows are not the innermost dims or pass the 32-bit limit.
  auto layout = !k.rows_innermost || k.traced_cols > index_limit().load() ? ReductionLayout::generic
                : k.vector > 1 && k.traced_cols % k.vector == 0           ? ReductionLayout::vector
                                                                          : ReductionLayout::flat;
  return reduction_variant(row_schedule(k, k.traced_cols, 1), layout);
}

const std::string& expected_source(const ReductionKernel& k) {
  return variant_source(k, expected_variant(k));
}

unsigned reduction_block(long long cols) {
  return cols <= 32     ? 32
         : cols <= 64   ? 64
         : cols <= 128  ? 128
         : cols <= 2048 ? 256
         : cols <= 4096 ? 512
                        : 1024;
}

std::vector<Tensor> run_reduction(const graph::Graph& g, const ReductionKernel& kernel,
                                  const Shape& domain, std::vector<Tensor>& values,
                                  std::span<const std::int64_t> symbol_values,
                                  const ReductionHandles* handles) {
  apply_host_views(g, kernel.host_views, values, symbol_values);
  LaunchScratch::Lease lease;
  LaunchScratch& sc = lease.scratch();
  auto rank = static_cast<int>(domain.size());
  std::vector<int>& kept = sc.kept;
  std::vector<int>& reduced = sc.reduced;
  reduced.assign(kernel.reduce_dims.begin(), kernel.reduce_dims.end());
  for (int d = 0; d < rank; ++d)
    if (std::find(reduced.begin(), reduced.end(), d) == reduced.end()) kept.push_back(d);
  long long rows = 1, cols = 1;
  for (int d : kept) rows *= domain[d];
  for (int d : reduced) cols *= domain[d];
  // The index struct: sizes, per-read strides split into kept and reduced dims, output strides.
  std::size_t nk = std::max<std::size_t>(1, kept.size()),
              nr = std::max<std::size_t>(1, reduced.size());
  auto split = [&](const auto& over_domain, std::vector<long long>& out,
                   const std::vector<int>& dims, std::size_t width, long long pad) {
    for (std::size_t i = 0; i < width; ++i)
      out.push_back(i < dims.size() ? over_domain[dims[i]] : pad);
  };
  std::vector<long long>& packed = sc.packed;
  split(domain, packed, kept, nk, 1);
  split(domain, packed, reduced, nr, 1);
  std::vector<cuda::DevicePtr>& pointers = sc.pointers;
  // Each read's strides over the domain, one row of `rank` per read (a row of zeros for none).
  std::vector<long long>& strides = sc.strides;
  strides.assign(std::max<std::size_t>(1, kernel.reads.size()) * rank, 0);
  for (std::size_t i = 0; i < kernel.reads.size(); ++i) {
    const auto& r = kernel.reads[i];
    const Tensor& t = values.at(r.value);
    KILN_CHECK(t.device().type == Device::Type::cuda,
               "codegen: kernel '{}' reads %{} on {}, not a CUDA device", kernel.name, r.value,
               t.device().str());
    domain_strides_into(t, r.frame_dims, std::span(strides).subspan(i * rank, rank));
    pointers.push_back(reinterpret_cast<cuda::DevicePtr>(t.raw_data()));
  }
  const std::size_t rows_of_strides = std::max<std::size_t>(1, kernel.reads.size());
  for (std::size_t i = 0; i < rows_of_strides; ++i)
    split(std::span(strides).subspan(i * rank, rank), packed, kept, nk, 0);
  for (std::size_t i = 0; i < rows_of_strides; ++i)
    split(std::span(strides).subspan(i * rank, rank), packed, reduced, nr, 0);
  // Outputs are contiguous over the domain.
  sc.out_strides.assign(std::max(1, rank), 1);
  for (int d = rank - 2; d >= 0; --d)
    sc.out_strides[d] = sc.out_strides[d + 1] * std::max<long long>(1, domain[d + 1]);
  split(sc.out_strides, packed, kept, nk, 0);
  split(sc.out_strides, packed, reduced, nr, 0);

  std::vector<std::array<unsigned char, 8>>& numbers = sc.numbers;
  for (int v : kernel.scalars) numbers.push_back(number_argument(values.at(v)));
  std::vector<Tensor> outs;
  outs.reserve(kernel.writes.size());
  for (std::size_t i = 0; i < kernel.writes.size(); ++i) {
    const auto& meta = g.values[kernel.writes[i]].meta;
    Shape shape;
    if (kernel.write_full[i])
      shape = domain;
    else if (static_cast<int>(meta.shape.size()) == rank)
      for (int d = 0; d < rank; ++d)
        shape.push_back(std::find(reduced.begin(), reduced.end(), d) == reduced.end() ? domain[d]
                                                                                      : 1);
    else
      for (int d : kept) shape.push_back(domain[d]);
    outs.push_back(empty(shape, meta.dtype, Device::cuda()));
    pointers.push_back(reinterpret_cast<cuda::DevicePtr>(outs.back().raw_data()));
  }
  std::vector<void*>& params = sc.params;
  std::size_t first_write = kernel.reads.size();
  for (std::size_t i = 0; i < first_write; ++i) params.push_back(&pointers[i]);
  for (auto& number : numbers) params.push_back(number.data());
  for (std::size_t i = first_write; i < pointers.size(); ++i) params.push_back(&pointers[i]);
  // A row select's out-of-range index: [flag, index], set by the kernel (device_checks.h).
  std::optional<DeviceCheck> check;
  cuda::DevicePtr error_ptr = 0;
  if (kernel.checks_index) {
    check = reserve_device_check([dim = reduced.at(0), cols](std::span<const std::int64_t> e) {
      throw IndexError(fmt::format("gather: index {} is out of range for dim {} of size {}{}", e[1],
                                   dim, cols, device_check_note()));
    });
    error_ptr = check->flag();
    params.push_back(&error_ptr);
  }
  // Few long rows (a full reduction is one) split over blocks: each folds a chunk of columns,
  // the last to arrive combines the chunks' partials in order.
  long long sms = cuda::backend().properties(0).sm_count;
  bool outer = use_outer_schedule(kernel, domain, kept, reduced, strides);
  bool outer_vector = outer && layout_limit().load() == static_cast<int>(ReductionLayout::vector) &&
                      outer_vectors_fit(kernel, domain, kept, strides, values);
  long long lane_rows = outer_vector ? kernel.outer_width : 1;
  unsigned block = outer ? kOuterBlockY : reduction_block(cols);
  long long row_blocks = outer ? (rows / lane_rows + 31) / 32 : rows;
  long long splits = kernel.splittable ? split_count(row_blocks, cols, block, sms) : 1;
  ReductionSchedule schedule = outer_vector ? ReductionSchedule::outer_vector
                               : outer      ? ReductionSchedule::outer
                                            : row_schedule(kernel, cols, splits);
  bool warp = schedule == ReductionSchedule::warp_per_row;
  Tensor partials, arrivals;
  cuda::DevicePtr partials_ptr = 0, arrivals_ptr = 0;
  if (kernel.splittable) {
    // Only a split row touches them (the kernel's second stage runs when splits > 1).
    if (splits > 1) {
      partials = empty({rows * splits * kernel.partial_slots}, DType::i64, Device::cuda());
      arrivals = zeros({rows}, DType::i32, Device::cuda());
      partials_ptr = reinterpret_cast<cuda::DevicePtr>(partials.raw_data());
      arrivals_ptr = reinterpret_cast<cuda::DevicePtr>(arrivals.raw_data());
    }
    params.push_back(&partials_ptr);
    params.push_back(&arrivals_ptr);
  }
  params.push_back(packed.data());
  params.push_back(&rows);
  params.push_back(&cols);
  params.push_back(&splits);
  // The outer schedule addresses its columns as before; the row schedules take a layout, and
  // a split row's chunk length: whole vectors of the vector layout, the last chunk shorter.
  int layout = outer ? 0
                     : static_cast<int>(choose_layout(kernel, domain, kept, reduced, cols, strides,
                                                      sc.out_strides, values, outs));
  const long long grain =
      !outer && layout == static_cast<int>(ReductionLayout::vector) ? kernel.vector : 1;
  long long chunk_cols = (cols / grain + splits - 1) / splits * grain;
  params.push_back(&chunk_cols);
  last_layout = outer_vector ? ReductionLayout::vector : static_cast<ReductionLayout>(layout);
  const int variant = reduction_variant(schedule, static_cast<ReductionLayout>(layout));
  if (rows == 0) return outs;
  bool on_chip = warp ? cols <= static_cast<long long>(kernel.warp_items) * kernel.warp_lanes
                      : cols <= static_cast<long long>(kernel.items) * block;
  std::int64_t read = 0, written = 0;
  for (const auto& r : kernel.reads)
    read += tensor_bytes(values.at(r.value)) * (r.on_chip && on_chip ? 1 : r.passes);
  for (const auto& o : outs) written += tensor_bytes(o);
  KernelHandle own;
  const KernelHandle* handle = handles ? &(*handles)[variant] : nullptr;
  if (!handle || handle->empty())
    handle = &(own = KernelHandle(kernel.name, variant_source(kernel, variant)));
  if (outer)
    handle->launch({static_cast<unsigned>(row_blocks), static_cast<unsigned>(splits), 1},
                   {32, block, 1}, params.data(), read, written);
  else if (warp) {
    const long long block_rows = kWarpRowBlock / kernel.warp_lanes;
    handle->launch(
        {static_cast<unsigned>(std::min<long long>((rows + block_rows - 1) / block_rows, sms * 16)),
         1, 1},
        {kWarpRowBlock, 1, 1}, params.data(), read, written);
  } else
    handle->launch({static_cast<unsigned>(std::min<long long>(rows, sms * 16)),
                    static_cast<unsigned>(splits), 1},
                   {block, 1, 1}, params.data(), read, written);
  if (check) check->launched();
  return outs;
}

}  // namespace kiln::jit::codegen

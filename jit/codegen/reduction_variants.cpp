// One variant of a reduction kernel (reduction_schedule.h: a form and a layout) rendered from
// the kernel's template data, and its handle, made when a launch first takes it.
#include "jit/codegen/reduction.h"
#include "jit/codegen/reduction_template_data.h"
#include "jit/codegen/templates.h"
#include "runtime/error.h"

namespace kiln::jit::codegen {

std::string render_reduction_variant(const ReductionKernel& k, ReductionVariant v) {
  const bool outer = v.form == ReductionForm::outer || v.form == ReductionForm::outer_vector;
  KILN_CHECK(k.block_data && (!outer || k.outer) &&
                 (v.form != ReductionForm::outer_vector || k.outer_vector),
             "codegen: kernel '{}' has no {} variant", k.name, v.str());
  ReductionTemplateData d = v.form == ReductionForm::warp_per_row ? *k.warp_data : *k.block_data;
  if (outer) {
    // The outer schedule addresses its columns its own way (the layout stays generic).
    d.outer_width = v.form == ReductionForm::outer_vector ? k.outer_width : 1;
    return render_template("reduction_outer.cu.mustache", d.to_data());
  }
  d.layout = static_cast<int>(v.layout);
  return render_template("reduction.cu.mustache", d.to_data());
}

const KernelHandle& reduction_variant_kernel(const ReductionKernel& k, ReductionVariant v) {
  return k.variants.get(v.index(),
                        [&] { return KernelHandle(k.name, render_reduction_variant(k, v)); });
}

}  // namespace kiln::jit::codegen

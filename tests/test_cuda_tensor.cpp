// Tensors on the CUDA device (the virtual GPU here): round trips in every dtype, views, device
// to device copies, gradients through device copies, allocator reuse, and clear errors.
#include <boost/test/unit_test.hpp>

#include <cstdlib>

#include "autograd/ops.h"
#include "runtime/cuda_backend.h"

using namespace kiln;

namespace {
struct UseVirtualGpu {
  UseVirtualGpu() { setenv("KILN_CUDA", "virtual", 0); }
};
}  // namespace

BOOST_AUTO_TEST_SUITE(cuda_tensors, *boost::unit_test::fixture<UseVirtualGpu>())

BOOST_AUTO_TEST_CASE(round_trip_preserves_values_in_every_dtype) {
  std::vector<double> values = {0, 1, -2.5, 3, 1e3, -7, 0.125, 42};
  for (DType t : kAllDTypes) {
    Tensor host = from_vector(values, {2, 4}).to(t);
    Tensor device = host.to(Device::cuda());
    BOOST_TEST(device.device().is_cuda());
    BOOST_TEST((device.dtype() == t));
    BOOST_TEST(device.shape() == host.shape());
    Tensor back = device.to(Device::cpu());
    BOOST_TEST(back.device().is_cpu());
    BOOST_TEST(back.to_vector<double>() == host.to_vector<double>(), "dtype " << dtype_name(t));
  }
}

BOOST_AUTO_TEST_CASE(views_of_device_tensors_copy_back_with_their_strides) {
  Tensor host = arange(0, 24, 1, DType::f32).reshape({2, 3, 4});
  Tensor device = host.to(Device::cuda());
  Tensor view = device.permute({2, 0, 1}).slice(0, 1, 4, 2).select(2, 1);  // [2, 2]
  Tensor expected = host.permute({2, 0, 1}).slice(0, 1, 4, 2).select(2, 1);
  BOOST_TEST(view.to(Device::cpu()).to_vector<float>() == expected.to_vector<float>());
  // A non-contiguous host tensor goes up as a contiguous copy.
  Tensor up = host.transpose(0, 1).contiguous().to(Device::cuda());
  BOOST_TEST(up.is_contiguous());
  Tensor t_up = host.transpose(0, 2).to(Device::cuda());
  BOOST_TEST(t_up.to_vector<float>() == host.transpose(0, 2).to_vector<float>());
}

BOOST_AUTO_TEST_CASE(device_to_device_copy_and_printing) {
  Tensor a = tensor({1, 2, 3}).to(Device::cuda());
  Tensor b = a.to(Device::cuda());  // same device: the same tensor
  BOOST_TEST(b.same(a));
  BOOST_TEST(a.str() == "tensor([1.0000, 2.0000, 3.0000], dtype=f32, device=cuda:0)");
  BOOST_TEST(tensor({5}).to(Device::cuda()).item() == 5.0);
  // A reused device block is zeroed only on request: empty() leaves it as a kernel would.
  Tensor dirty = full({2, 2}, 7.0, DType::f64).to(Device::cuda());
  dirty = Tensor();
  Tensor z = zeros({2, 2}, DType::f64, Device::cuda());
  BOOST_TEST(z.to_vector<double>() == (std::vector<double>{0, 0, 0, 0}));
  BOOST_TEST(empty({2, 2}, DType::f64, Device::cuda()).shape() == (Shape{2, 2}));
}

BOOST_AUTO_TEST_CASE(gradients_flow_through_device_copies) {
  Tensor x = from_vector(std::vector<double>{1, 2, 3});
  x.requires_grad_();
  Tensor y = x.to(Device::cuda()).to(Device::cpu());
  (y * y).sum().backward();
  BOOST_TEST(x.grad().to_vector<double>() == (std::vector<double>{2, 4, 6}));
  BOOST_TEST(x.grad().device().is_cpu());
}

BOOST_AUTO_TEST_CASE(the_allocator_reuses_freed_blocks) {
  auto& alloc = cuda_allocator();
  { Tensor warm = zeros({256}).to(Device::cuda()); }
  auto before = alloc.stats();
  for (int i = 0; i < 5; ++i) Tensor t = zeros({256}).to(Device::cuda());
  auto after = alloc.stats();
  BOOST_TEST(after.num_allocs - before.num_allocs == 5u);
  BOOST_TEST(after.num_cache_hits - before.num_cache_hits == 5u);
  BOOST_TEST(after.num_backend_allocs == before.num_backend_allocs);
}

BOOST_AUTO_TEST_CASE(misuse_of_device_tensors_is_an_error) {
  Tensor a = tensor({1, 2}).to(Device::cuda());
  BOOST_CHECK_EXCEPTION(a + tensor({1, 2}), Error, [](const Error& e) {
    return std::string(e.what()).find("different devices") != std::string::npos;
  });
  BOOST_CHECK_EXCEPTION(tensor({1}).to(Device::cuda(3)), Error, [](const Error& e) {
    return std::string(e.what()).find("cuda:3") != std::string::npos;
  });
  BOOST_CHECK_THROW(a.data<float>(), Error);
}

BOOST_AUTO_TEST_SUITE_END()

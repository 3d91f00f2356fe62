// Tests of the BLAS-Lt service: real cuBLASLt descriptors built and read back without a GPU, the
// virtual GPU's implementation of cuBLASLt's documented contract against a naive reference written
// here (every epilogue, transposes, strided batches, f32/TF32/f16/bf16/f64, aux formats, bias
// gradients), its rule checks, and the driver path failing at first use without a GPU.
#include <bit>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>
#include <iterator>
#include <random>
#include <stdexcept>
#include <vector>

#include "runtime/cuda/backends.h"
#include "runtime/cuda/blaslt/blaslt.h"
#include "runtime/cuda/blaslt/lt_api.h"
#include "runtime/cuda/selection.h"
#include "runtime/error.h"
#include "support/float_bits.h"
#include "support/skip_if.h"

namespace {

using namespace kiln::cuda;
using namespace kiln::cuda::blaslt;

Backend& vgpu_backend() {
  return backend("virtual");
}

// The backend check_case runs on: the virtual GPU, or the driver while a DriverCase is alive.
Backend* case_driver = nullptr;
Backend& case_backend() {
  return case_driver ? *case_driver : vgpu_backend();
}

std::size_t bytes_of(cudaDataType_t t) {
  return t == CUDA_R_32F ? 4 : t == CUDA_R_64F ? 8 : 2;
}
// The bits of `v` stored as `t`, and back: f16 and bf16 from encodings written out in the test
// (support/float_bits.h), f32 by the host's own conversion; never the interpreter's.
std::uint64_t stored_bits(cudaDataType_t t, double v) {
  if (t == CUDA_R_16F) return kiln::test::f16_bits(v);
  if (t == CUDA_R_16BF) return kiln::test::bf16_bits(v);
  if (t == CUDA_R_32F) return std::bit_cast<std::uint32_t>(static_cast<float>(v));
  return std::bit_cast<std::uint64_t>(v);
}
double stored_value(cudaDataType_t t, std::uint64_t bits) {
  if (t == CUDA_R_16F) return kiln::test::f16_value(static_cast<std::uint16_t>(bits));
  if (t == CUDA_R_16BF) return kiln::test::bf16_value(static_cast<std::uint16_t>(bits));
  if (t == CUDA_R_32F) return std::bit_cast<float>(static_cast<std::uint32_t>(bits));
  return std::bit_cast<double>(bits);
}
// The value `v` takes once stored as `t`.
double rounded(cudaDataType_t t, double v) {
  return stored_value(t, stored_bits(t, v));
}

// A device buffer of `n` elements of type `t` on the virtual GPU.
struct Buffer {
  cudaDataType_t type;
  std::size_t n;
  DevicePtr ptr;
  Buffer(cudaDataType_t t, std::size_t count) : type(t), n(count) {
    ptr = case_backend().alloc(std::max<std::size_t>(n * bytes_of(t), 1));
  }
  ~Buffer() { case_backend().free(ptr); }
  void upload(const std::vector<double>& v) {
    std::vector<unsigned char> raw(n * bytes_of(type));
    for (std::size_t i = 0; i < n; ++i) {
      std::uint64_t bits = stored_bits(type, v[i]);
      std::memcpy(raw.data() + i * bytes_of(type), &bits, bytes_of(type));
    }
    case_backend().copy_to_device(ptr, raw.data(), raw.size());
  }
  std::vector<double> download() const {
    std::vector<unsigned char> raw(n * bytes_of(type));
    case_backend().copy_to_host(raw.data(), ptr, raw.size());
    std::vector<double> out(n);
    for (std::size_t i = 0; i < n; ++i) {
      std::uint64_t bits = 0;
      std::memcpy(&bits, raw.data() + i * bytes_of(type), bytes_of(type));
      out[i] = stored_value(type, bits);
    }
    return out;
  }
};

std::vector<double> random_values(std::size_t n, cudaDataType_t t, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<double> v(n);
  for (auto& x : v) x = rounded(t, dist(gen));
  return v;
}

double gelu(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}
double gelu_grad(double x) {  // by central differences: independent of the code under test
  const double h = 1e-6;
  return (gelu(x + h) - gelu(x - h)) / (2 * h);
}

struct Case {
  int m = 5, n = 7, k = 9, batch = 1;
  cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  cudaDataType_t type = CUDA_R_32F;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  double alpha = 1, beta = 0;
};

// What each epilogue does, written out from cuBLASLt's documentation (not from the service's
// helpers, which epilogue_classes checks against it): reads a bias, writes a bias gradient,
// applies ReLU or GELU, writes (forward) or reads (D*) the aux, is a backward form.
struct EpilogueParts {
  cublasLtEpilogue_t e;
  const char* name;
  bool bias, bgrad, relu, gelu, aux, backward;
};
// clang-format off
const EpilogueParts kEpilogueTable[] = {
    // epilogue                      name             bias   bgrad  relu   gelu   aux    backward
    {CUBLASLT_EPILOGUE_DEFAULT,       "DEFAULT",       false, false, false, false, false, false},
    {CUBLASLT_EPILOGUE_RELU,          "RELU",          false, false, true,  false, false, false},
    {CUBLASLT_EPILOGUE_RELU_AUX,      "RELU_AUX",      false, false, true,  false, true,  false},
    {CUBLASLT_EPILOGUE_BIAS,          "BIAS",          true,  false, false, false, false, false},
    {CUBLASLT_EPILOGUE_RELU_BIAS,     "RELU_BIAS",     true,  false, true,  false, false, false},
    {CUBLASLT_EPILOGUE_RELU_AUX_BIAS, "RELU_AUX_BIAS", true,  false, true,  false, true,  false},
    {CUBLASLT_EPILOGUE_DRELU,         "DRELU",         false, false, false, false, true,  true},
    {CUBLASLT_EPILOGUE_DRELU_BGRAD,   "DRELU_BGRAD",   false, true,  false, false, true,  true},
    {CUBLASLT_EPILOGUE_GELU,          "GELU",          false, false, false, true,  false, false},
    {CUBLASLT_EPILOGUE_GELU_AUX,      "GELU_AUX",      false, false, false, true,  true,  false},
    {CUBLASLT_EPILOGUE_GELU_BIAS,     "GELU_BIAS",     true,  false, false, true,  false, false},
    {CUBLASLT_EPILOGUE_GELU_AUX_BIAS, "GELU_AUX_BIAS", true,  false, false, true,  true,  false},
    {CUBLASLT_EPILOGUE_DGELU,         "DGELU",         false, false, false, false, true,  true},
    {CUBLASLT_EPILOGUE_DGELU_BGRAD,   "DGELU_BGRAD",   false, true,  false, false, true,  true},
    {CUBLASLT_EPILOGUE_BGRADA,        "BGRADA",        false, true,  false, false, false, false},
    {CUBLASLT_EPILOGUE_BGRADB,        "BGRADB",        false, true,  false, false, false, false},
};
// clang-format on
const EpilogueParts& parts(cublasLtEpilogue_t e) {
  for (const auto& p : kEpilogueTable)
    if (p.e == e) return p;
  throw std::runtime_error("no such epilogue in the test's table");
}

bool relu_aux(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_RELU_AUX || e == CUBLASLT_EPILOGUE_RELU_AUX_BIAS ||
         e == CUBLASLT_EPILOGUE_DRELU || e == CUBLASLT_EPILOGUE_DRELU_BGRAD;
}

// Runs `c` on the virtual service and checks D, aux and bias against a naive reference.
void check_case(const Case& c, double tol) {
  const int m = c.m, n = c.n, k = c.k, B = c.batch;
  const cublasLtEpilogue_t e = c.epilogue;
  const EpilogueParts& part = parts(e);
  const bool backward = part.backward;
  const bool relu_mask = relu_aux(e);
  // Column-major operands with padded leading dimensions, batches one after another.
  const int a_rows = c.ta == CUBLAS_OP_N ? m : k, a_cols = c.ta == CUBLAS_OP_N ? k : m;
  const int b_rows = c.tb == CUBLAS_OP_N ? k : n, b_cols = c.tb == CUBLAS_OP_N ? n : k;
  const int lda = a_rows + 3, ldb = b_rows + 1, ldd = m + 2;
  const std::int64_t sa = std::int64_t(lda) * a_cols, sb = std::int64_t(ldb) * b_cols,
                     sd = std::int64_t(ldd) * n;
  const std::int64_t aux_ld = relu_mask ? (m + 127) / 128 * 128 : (m + 7) / 8 * 8;
  const std::int64_t aux_stride = aux_ld * n;
  Buffer A(c.type, sa * B), Bm(c.type, sb * B), C(c.type, sd * B), D(c.type, sd * B);
  auto av = random_values(A.n, c.type, 1), bv = random_values(Bm.n, c.type, 2),
       cv = random_values(C.n, c.type, 3);
  A.upload(av), Bm.upload(bv), C.upload(cv);
  const int bias_len = e == CUBLASLT_EPILOGUE_BGRADB ? n : m;
  Buffer bias(c.type, bias_len * B);
  auto biasv = random_values(bias.n, c.type, 4);
  bias.upload(biasv);
  // GELU aux holds D's type; the ReLU mask is bits, held here in a byte buffer via f16 words.
  std::size_t aux_elems = relu_mask ? (aux_stride * B + 15) / 16 : aux_stride * B;
  Buffer aux(c.type == CUDA_R_32F && relu_mask ? CUDA_R_16F : (relu_mask ? CUDA_R_16F : c.type),
             aux_elems);
  std::vector<double> pre_ref;  // backward inputs: the pre-activation the aux encodes
  if (backward) {
    pre_ref = random_values(std::size_t(m) * n * B, c.type, 5);
    if (relu_mask) {
      std::vector<unsigned char> bits(aux_elems * 2, 0);
      for (int b = 0; b < B; ++b)
        for (int j = 0; j < n; ++j)
          for (int i = 0; i < m; ++i)
            if (pre_ref[(std::size_t(b) * n + j) * m + i] > 0) {
              std::int64_t bit = b * aux_stride + j * aux_ld + i;
              bits[bit / 8] |= 1u << (bit % 8);
            }
      case_backend().copy_to_device(aux.ptr, bits.data(), bits.size());
    } else {
      std::vector<double> v(aux.n, 0);
      for (int b = 0; b < B; ++b)
        for (int j = 0; j < n; ++j)
          for (int i = 0; i < m; ++i)
            v[b * aux_stride + j * aux_ld + i] = pre_ref[(std::size_t(b) * n + j) * m + i];
      aux.upload(v);
    }
  }

  MatmulSpec s;
  s.compute = c.compute;
  s.scale = c.type == CUDA_R_64F ? CUDA_R_64F : CUDA_R_32F;
  s.trans_a = c.ta, s.trans_b = c.tb, s.epilogue = e;
  s.a = {c.type, std::uint64_t(a_rows), std::uint64_t(a_cols), lda, CUBLASLT_ORDER_COL, B, sa};
  s.b = {c.type, std::uint64_t(b_rows), std::uint64_t(b_cols), ldb, CUBLASLT_ORDER_COL, B, sb};
  s.c = s.d = {c.type, std::uint64_t(m), std::uint64_t(n), ldd, CUBLASLT_ORDER_COL, B, sd};
  if (part.bias || part.bgrad) {
    s.bias = bias.ptr;
    if (B > 1) s.bias_batch_stride = bias_len;
  }
  if (part.aux) {
    s.aux = aux.ptr, s.aux_ld = aux_ld;
    if (B > 1) s.aux_batch_stride = aux_stride;
  }
  Descriptors desc(s);
  std::vector<unsigned char> scalars(32);
  if (c.type == CUDA_R_64F) {
    double ab[2] = {c.alpha, c.beta};
    std::memcpy(scalars.data(), ab, sizeof ab);
  } else {
    float ab[2] = {float(c.alpha), float(c.beta)};
    std::memcpy(scalars.data(), ab, sizeof ab);
  }
  const std::size_t ab_size = c.type == CUDA_R_64F ? 8 : 4;
  BlasLt& lt = service(case_backend());
  std::size_t calls = lt.calls();
  lt.matmul(make_call(desc, scalars.data(), scalars.data() + ab_size, A.ptr, Bm.ptr, C.ptr, D.ptr));
  BOOST_TEST(lt.calls() == calls + 1);

  auto dv = D.download();
  auto outv = bias.download();
  std::vector<unsigned char> aux_bits(aux.n * 2);
  if (relu_mask) case_backend().copy_to_host(aux_bits.data(), aux.ptr, aux_bits.size());
  auto auxv = relu_mask ? std::vector<double>() : aux.download();
  auto in_a = [&](int b, int i, int l) {  // op(A)[i, l]
    return c.ta == CUBLAS_OP_N ? av[b * sa + std::int64_t(l) * lda + i]
                               : av[b * sa + std::int64_t(i) * lda + l];
  };
  auto in_b = [&](int b, int l, int j) {
    return c.tb == CUBLAS_OP_N ? bv[b * sb + std::int64_t(j) * ldb + l]
                               : bv[b * sb + std::int64_t(l) * ldb + j];
  };
  auto tf = [&](double v) {  // TF32 keeps 10 mantissa bits
    if (c.compute != CUBLAS_COMPUTE_32F_FAST_TF32) return v;
    int ex;
    double f = std::frexp(v, &ex);
    return std::ldexp(std::round(f * 2048) / 2048, ex);
  };
  int bad = 0;
  auto near = [&](double got, double want, const char* what, int b, int i, int j) {
    if (std::abs(got - want) <= tol * (1 + std::abs(want))) return;
    if (++bad <= 5)
      BOOST_ERROR(what << " [" << b << "," << i << "," << j << "] " << got << " vs " << want);
  };
  for (int b = 0; b < B; ++b) {
    std::vector<double> colsum(m, 0);
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        double acc = 0;
        for (int l = 0; l < k; ++l) acc += tf(in_a(b, i, l)) * tf(in_b(b, l, j));
        double x = c.alpha * acc + c.beta * cv[b * sd + std::int64_t(j) * ldd + i];
        if (part.bias) x += biasv[b * bias_len + i];
        if (part.aux && !backward) {
          if (relu_mask) {
            std::int64_t bit = b * aux_stride + j * aux_ld + i;
            bool on = aux_bits[bit / 8] >> (bit % 8) & 1;
            if (std::abs(x) > tol) BOOST_TEST(on == (x > 0));
          } else {
            near(auxv[b * aux_stride + j * aux_ld + i], x, "aux", b, i, j);
          }
        }
        if (part.relu) x = std::max(x, 0.0);
        if (part.gelu) x = gelu(x);
        if (backward) {
          double pre = pre_ref[(std::size_t(b) * n + j) * m + i];
          x *= relu_mask ? (pre > 0 ? 1.0 : 0.0) : gelu_grad(pre);
        }
        colsum[i] += x;
        near(dv[b * sd + std::int64_t(j) * ldd + i], x, "D", b, i, j);
      }
    if (e == CUBLASLT_EPILOGUE_DRELU_BGRAD || e == CUBLASLT_EPILOGUE_DGELU_BGRAD)
      for (int i = 0; i < m; ++i) near(outv[b * bias_len + i], colsum[i], "bgrad", b, i, 0);
    if (e == CUBLASLT_EPILOGUE_BGRADA)
      for (int i = 0; i < m; ++i) {
        double sum = 0;
        for (int l = 0; l < k; ++l) sum += tf(in_a(b, i, l));
        near(outv[b * bias_len + i], sum, "bgrada", b, i, 0);
      }
    if (e == CUBLASLT_EPILOGUE_BGRADB)
      for (int j = 0; j < n; ++j) {
        double sum = 0;
        for (int l = 0; l < k; ++l) sum += tf(in_b(b, l, j));
        near(outv[b * bias_len + j], sum, "bgradb", b, 0, j);
      }
  }
  BOOST_TEST(bad == 0);
}

const cublasLtEpilogue_t kAllEpilogues[] = {
    CUBLASLT_EPILOGUE_DEFAULT,  CUBLASLT_EPILOGUE_RELU,        CUBLASLT_EPILOGUE_RELU_AUX,
    CUBLASLT_EPILOGUE_BIAS,     CUBLASLT_EPILOGUE_RELU_BIAS,   CUBLASLT_EPILOGUE_RELU_AUX_BIAS,
    CUBLASLT_EPILOGUE_DRELU,    CUBLASLT_EPILOGUE_DRELU_BGRAD, CUBLASLT_EPILOGUE_GELU,
    CUBLASLT_EPILOGUE_GELU_AUX, CUBLASLT_EPILOGUE_GELU_BIAS,   CUBLASLT_EPILOGUE_GELU_AUX_BIAS,
    CUBLASLT_EPILOGUE_DGELU,    CUBLASLT_EPILOGUE_DGELU_BGRAD, CUBLASLT_EPILOGUE_BGRADA,
    CUBLASLT_EPILOGUE_BGRADB};

BOOST_AUTO_TEST_SUITE(blaslt_descriptors)

BOOST_AUTO_TEST_CASE(library_loads_without_a_gpu) {
  const LtApi& api = lt_api();
  BOOST_TEST(api.version >= 130000u);
  BOOST_TEST(!api.path.empty());
}

BOOST_AUTO_TEST_CASE(every_attribute_reads_back) {
  for (auto e : kAllEpilogues) {
    MatmulSpec s;
    s.compute = CUBLAS_COMPUTE_32F_FAST_TF32;
    s.trans_a = CUBLAS_OP_T;
    s.epilogue = e;
    s.bias = 0x7f0000001000;
    s.bias_type = CUDA_R_32F;
    s.bias_batch_stride = 64;
    s.aux = 0x7f0000002000;
    s.aux_ld = 128;
    s.aux_batch_stride = 128 * 3;
    s.aux_type = CUDA_R_16F;
    s.a = {CUDA_R_16F, 32, 64, 40, CUBLASLT_ORDER_COL, 2, 40 * 64};
    s.b = {CUDA_R_16F, 32, 3, 32, CUBLASLT_ORDER_COL, 2, 96};
    s.c = s.d = {CUDA_R_16F, 64, 3, 64, CUBLASLT_ORDER_COL, 2, 192};
    Descriptors d(s);
    MatmulSpec r = read_back(d);
    BOOST_TEST(r.compute == s.compute);
    BOOST_TEST(r.scale == CUDA_R_32F);
    BOOST_TEST(r.trans_a == CUBLAS_OP_T);
    BOOST_TEST(r.trans_b == CUBLAS_OP_N);
    BOOST_TEST(r.epilogue == e);
    BOOST_TEST(r.bias == s.bias);
    BOOST_TEST(r.bias_type == CUDA_R_32F);
    BOOST_TEST(r.bias_batch_stride == 64);
    BOOST_TEST(r.aux == s.aux);
    BOOST_TEST(r.aux_ld == 128);
    BOOST_TEST(r.aux_batch_stride == 384);
    BOOST_TEST(r.aux_type == CUDA_R_16F);
    for (auto [got, want] : {std::pair{r.a, s.a}, {r.b, s.b}, {r.c, s.c}, {r.d, s.d}}) {
      BOOST_TEST(got.type == want.type);
      BOOST_TEST(got.rows == want.rows);
      BOOST_TEST(got.cols == want.cols);
      BOOST_TEST(got.ld == want.ld);
      BOOST_TEST(got.order == CUBLASLT_ORDER_COL);
      BOOST_TEST(got.batch_count == 2);
      BOOST_TEST(got.batch_stride == want.batch_stride);
    }
    BOOST_TEST(r.m() == 64u);
    BOOST_TEST(r.k() == 32u);
    BOOST_TEST(r.n() == 3u);
  }
}

BOOST_AUTO_TEST_CASE(defaults_read_back) {
  MatmulSpec s;
  s.a = s.b = s.c = s.d = {CUDA_R_32F, 4, 4, 4};
  MatmulSpec r = read_back(Descriptors(s));
  BOOST_TEST(r.epilogue == CUBLASLT_EPILOGUE_DEFAULT);
  BOOST_TEST(r.bias == 0u);
  BOOST_TEST(r.bias_type == -1);
  BOOST_TEST(r.aux == 0u);
  BOOST_TEST(r.aux_type == -1);
  BOOST_TEST(r.a.batch_count == 1);
}

BOOST_AUTO_TEST_CASE(epilogue_classes) {
  // The service's classification of every epilogue, against the table written from the docs.
  for (const auto& p : kEpilogueTable) {
    BOOST_TEST_CONTEXT(p.name) {
      BOOST_TEST(epilogue_has_bias(p.e) == p.bias);
      BOOST_TEST(epilogue_writes_bgrad(p.e) == p.bgrad);
      BOOST_TEST(epilogue_is_relu(p.e) == p.relu);
      BOOST_TEST(epilogue_is_gelu(p.e) == p.gelu);
      BOOST_TEST(epilogue_has_aux(p.e) == p.aux);
      BOOST_TEST(epilogue_is_backward(p.e) == p.backward);
      BOOST_TEST(epilogue_name(p.e) == p.name);
    }
  }
  BOOST_TEST(std::size(kEpilogueTable) == std::size(kAllEpilogues));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(blaslt_virtual_contract)

BOOST_AUTO_TEST_CASE(every_epilogue_f32_with_transposes) {
  for (auto e : kAllEpilogues)
    for (auto ta : {CUBLAS_OP_N, CUBLAS_OP_T})
      for (auto tb : {CUBLAS_OP_N, CUBLAS_OP_T}) {
        BOOST_TEST_CONTEXT("epilogue " << epilogue_name(e) << " ta " << ta << " tb " << tb) {
          Case c;
          c.epilogue = e, c.ta = ta, c.tb = tb;
          check_case(c, 1e-5);
        }
      }
}

BOOST_AUTO_TEST_CASE(alpha_beta_and_strided_batches) {
  for (auto e :
       {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, CUBLASLT_EPILOGUE_RELU_AUX_BIAS,
        CUBLASLT_EPILOGUE_DGELU_BGRAD, CUBLASLT_EPILOGUE_DRELU_BGRAD, CUBLASLT_EPILOGUE_BGRADB}) {
    BOOST_TEST_CONTEXT("epilogue " << epilogue_name(e)) {
      Case c;
      c.epilogue = e, c.batch = 3, c.alpha = 0.5, c.beta = e == CUBLASLT_EPILOGUE_DEFAULT ? 2 : 0;
      c.m = 130, c.n = 4, c.k = 6;
      check_case(c, 1e-5);
    }
  }
}

BOOST_AUTO_TEST_CASE(half_types_compute_in_f32_and_round_once) {
  for (auto t : {CUDA_R_16F, CUDA_R_16BF})
    for (auto e :
         {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, CUBLASLT_EPILOGUE_RELU_BIAS,
          CUBLASLT_EPILOGUE_DGELU_BGRAD, CUBLASLT_EPILOGUE_BGRADB}) {
      BOOST_TEST_CONTEXT("type " << data_type_name(t) << " epilogue " << epilogue_name(e)) {
        Case c;
        c.type = t, c.epilogue = e, c.k = 32, c.ta = CUBLAS_OP_T;
        check_case(c, t == CUDA_R_16F ? 2e-3 : 1.6e-2);
      }
    }
}

BOOST_AUTO_TEST_CASE(tf32_rounds_inputs) {
  Case c;
  c.compute = CUBLAS_COMPUTE_32F_FAST_TF32, c.k = 64, c.epilogue = CUBLASLT_EPILOGUE_BIAS;
  check_case(c, 1e-5);
}

BOOST_AUTO_TEST_CASE(f64_default_and_bias) {
  for (auto e : {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_BGRADB}) {
    Case c;
    c.type = CUDA_R_64F, c.compute = CUBLAS_COMPUTE_64F, c.epilogue = e, c.tb = CUBLAS_OP_T;
    check_case(c, 1e-12);
  }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(blaslt_rules)

// A small f32 problem whose spec a test breaks one rule of.
void expect_error(MatmulSpec s, DevicePtr a, DevicePtr b, DevicePtr d, const std::string& needle) {
  Descriptors desc(s);
  float alpha = 1, beta = 0;
  try {
    service(vgpu_backend()).matmul(make_call(desc, &alpha, &beta, a, b, d, d));
    BOOST_ERROR("expected an error containing '" << needle << "'");
  } catch (const kiln::Error& e) {
    BOOST_TEST_INFO(e.what());
    BOOST_TEST(std::string(e.what()).find(needle) != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(documented_rules_are_errors) {
  Buffer a(CUDA_R_32F, 64), b(CUDA_R_32F, 64), d(CUDA_R_32F, 64), aux(CUDA_R_32F, 4096),
      bias(CUDA_R_32F, 8);
  MatmulSpec s;
  s.a = s.b = s.c = s.d = {CUDA_R_32F, 8, 8, 8};
  s.epilogue = CUBLASLT_EPILOGUE_RELU_AUX;
  s.aux = aux.ptr, s.aux_ld = 64;
  expect_error(s, a.ptr, b.ptr, d.ptr, "multiple of 128");
  s.epilogue = CUBLASLT_EPILOGUE_GELU_AUX, s.aux_ld = 12;
  expect_error(s, a.ptr, b.ptr, d.ptr, "multiple of 8");
  s.epilogue = CUBLASLT_EPILOGUE_BIAS, s.aux = 0;
  expect_error(s, a.ptr, b.ptr, d.ptr, "BIAS_POINTER");
  s.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  s.d.order = s.c.order = CUBLASLT_ORDER_ROW;
  expect_error(s, a.ptr, b.ptr, d.ptr, "column-major");
  s.d.order = s.c.order = CUBLASLT_ORDER_COL;
  s.a.type = CUDA_R_16F;
  expect_error(s, a.ptr, b.ptr, d.ptr, "CUBLAS_STATUS_NOT_SUPPORTED");
  s.a.type = CUDA_R_32F;
  s.b.cols = 9, s.c.cols = s.d.cols = 9;  // D now needs 72 floats: past the 64 allocated
  expect_error(s, a.ptr, b.ptr, d.ptr, "cublasLtMatmul B");
}

BOOST_AUTO_TEST_CASE(driver_service_fails_at_first_use_without_a_gpu) {
  // The driver's service is created without touching the driver or the GPU ...
  auto lt = make_driver_blaslt(vgpu_backend());
  BOOST_TEST(lt->kind() == "cublasLt");
  BOOST_TEST(lt->workspace_bytes() == std::size_t(32) << 20);  // the virtual GPU is sm_90
  MatmulSpec s;
  s.a = s.b = s.c = s.d = {CUDA_R_32F, 4, 4, 4};
  Descriptors desc(s);
  float alpha = 1, beta = 0;
  // ... and its first matmul says what is missing (here: no driver, or no GPU for a handle).
  try {
    lt->matmul(make_call(desc, &alpha, &beta, 0, 0, 0, 0));
    BOOST_TEST_MESSAGE("a GPU is present: the driver path ran");
  } catch (const kiln::Error& e) {
    std::string what = e.what();
    BOOST_TEST_INFO(what);
    BOOST_TEST((what.find("CUDA driver") != std::string::npos ||
                what.find("cublasLtCreate") != std::string::npos));
  }
}

// On a machine with a GPU, the real cuBLASLt against the same reference (elsewhere: skipped).
BOOST_AUTO_TEST_CASE(the_driver_matches_the_reference_on_a_gpu, *kiln::test::skip_if([] {
                       try {
                         backend("driver");
                         return std::string();
                       } catch (const kiln::Error& e) {
                         return std::string("no GPU: it runs on a machine with one (") + e.what() +
                                ")";
                       }
                     })) {
  Backend* driver = &backend("driver");
  struct DriverCase {
    explicit DriverCase(Backend* b) { case_driver = b; }
    ~DriverCase() { case_driver = nullptr; }
  } use(driver);
  for (auto e :
       {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_GELU_AUX_BIAS,
        CUBLASLT_EPILOGUE_RELU_AUX_BIAS, CUBLASLT_EPILOGUE_DGELU_BGRAD, CUBLASLT_EPILOGUE_BGRADB}) {
    BOOST_TEST_CONTEXT("epilogue " << epilogue_name(e)) {
      Case c;
      c.epilogue = e, c.ta = CUBLAS_OP_T;
      check_case(c, 1e-5);
      c.type = CUDA_R_16F, c.k = 32;
      check_case(c, 2e-3);
    }
  }
}

BOOST_AUTO_TEST_CASE(workspace_sizes) {
  DeviceProperties p;
  p.compute_major = 9;
  BOOST_TEST(workspace_bytes_for(p) == std::size_t(32) << 20);
  p.compute_major = 8;
  BOOST_TEST(workspace_bytes_for(p) == std::size_t(4) << 20);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace

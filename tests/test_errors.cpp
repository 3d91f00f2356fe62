// Every op validates its inputs: the exception type (ShapeError, DTypeError, IndexError, Error)
// and a message that names the op and the offending shapes, dtypes or values.
#include <boost/test/unit_test.hpp>

#include "support/reference.h"

using namespace kiln;
using namespace kiln::test;

BOOST_AUTO_TEST_SUITE(errors)

BOOST_AUTO_TEST_CASE(binary_ops_reject_shapes_that_do_not_broadcast) {
  Tensor a = zeros({2, 3}), b = zeros({4, 5});
  KILN_CHECK_THROWS(a + b, ShapeError, "add", "[2, 3]", "[4, 5]");
  KILN_CHECK_THROWS(mul(a, zeros({3, 2})), ShapeError, "mul", "[2, 3]", "[3, 2]");
  KILN_CHECK_THROWS(a < b, ShapeError, "lt", "[2, 3]", "[4, 5]");
  KILN_CHECK_THROWS(logical_and(a, b), ShapeError, "logical_and", "[2, 3]", "[4, 5]");
  KILN_CHECK_THROWS(where(bools({true, false}, {2}), a, a), ShapeError, "where", "[2]", "[2, 3]");
  KILN_CHECK_THROWS(mse_loss(a, zeros({3, 2})), ShapeError, "mse_loss", "[2, 3]", "[3, 2]");
}

BOOST_AUTO_TEST_CASE(matmul_rejects_mismatched_inner_dims) {
  KILN_CHECK_THROWS(matmul(zeros({2, 3}), zeros({4, 5})), ShapeError, "matmul", "[2, 3]", "[4, 5]");
  KILN_CHECK_THROWS(matmul(zeros({2, 2, 3}), zeros({3, 3, 1})), ShapeError, "matmul", "[2]", "[3]");
  KILN_CHECK_THROWS(matmul(scalar_tensor(1), zeros({2})), ShapeError, "matmul", "[]", "[2]");
  KILN_CHECK_THROWS(matmul(bools({true}, {1, 1}), bools({true}, {1, 1})), DTypeError, "matmul",
                    "bool");
  KILN_CHECK_THROWS(linear(zeros({2, 3}), zeros({3})), ShapeError, "linear", "[3]");
  KILN_CHECK_THROWS(linear(zeros({2, 3}), zeros({4, 5})), ShapeError, "linear", "[2, 3]", "[4, 5]");
}

BOOST_AUTO_TEST_CASE(matmul_of_vectors_names_the_shapes_the_caller_passed) {
  KILN_CHECK_THROWS(matmul(zeros({3}), zeros({4})), ShapeError, "matmul", "[3]", "[4]");
}

BOOST_AUTO_TEST_CASE(ops_reject_dims_out_of_range) {
  Tensor x = zeros({2, 3});
  KILN_CHECK_THROWS(sum(x, {2}), IndexError, "sum", "dim 2", "rank 2");
  KILN_CHECK_THROWS(amax(x, {-3}), IndexError, "amax", "-3");
  KILN_CHECK_THROWS(argmax(x, 5), IndexError, "argmax", "5");
  KILN_CHECK_THROWS(sum(x, {0, -2}), IndexError, "sum", "twice");
  KILN_CHECK_THROWS(softmax(x, 2), IndexError, "softmax", "2");
  KILN_CHECK_THROWS(log_softmax(x, -3), IndexError, "log_softmax", "-3");
  KILN_CHECK_THROWS(x.transpose(0, 2), IndexError, "transpose", "2");
  KILN_CHECK_THROWS(cat({x, x}, 2), IndexError, "cat", "2");
  KILN_CHECK_THROWS(stack({x, x}, 3), IndexError, "stack", "3");
  KILN_CHECK_THROWS(x.unsqueeze(3), IndexError, "unsqueeze", "3");
  KILN_CHECK_THROWS(x.squeeze(2), IndexError, "squeeze", "2");
  KILN_CHECK_THROWS(x.flatten(1, 0), IndexError, "flatten", "1", "0");
  KILN_CHECK_THROWS(x.size(2), IndexError, "size", "2");
  KILN_CHECK_THROWS(gather(x, 2, zeros({2, 3}, DType::i64)), IndexError, "gather", "2");
  KILN_CHECK_THROWS(x.slice(2, 0, 1), IndexError, "slice", "2");
}

BOOST_AUTO_TEST_CASE(ops_reject_unsupported_dtypes) {
  Tensor b = bools({true, false}, {2});
  KILN_CHECK_THROWS(b + b, DTypeError, "add", "bool", "[2]");
  KILN_CHECK_THROWS(neg(b), DTypeError, "neg", "bool");
  KILN_CHECK_THROWS(abs(b), DTypeError, "abs", "bool");
  KILN_CHECK_THROWS(mean(i64s({1, 2})), DTypeError, "mean", "i64");
  KILN_CHECK_THROWS(var(i32s({1, 2}, {2})), DTypeError, "var", "i32");
  KILN_CHECK_THROWS(logsumexp(i64s({1, 2}), {0}), DTypeError, "logsumexp", "i64");
  KILN_CHECK_THROWS(layer_norm(i64s({1, 2}), {2}), DTypeError, "layer_norm", "i64");
  KILN_CHECK_THROWS(rms_norm(b, {2}), DTypeError, "rms_norm", "bool");
  KILN_CHECK_THROWS(dropout(i64s({1, 2}), 0.5), DTypeError, "dropout", "i64");
  KILN_CHECK_THROWS(where(f32s({1, 0}), b, b), DTypeError, "where", "f32");
  KILN_CHECK_THROWS(f32s({1}).data<double>(), DTypeError, "data", "f32", "f64");
  KILN_CHECK_THROWS(scatter_add(zeros({2}), 0, i64s({0}), zeros({1}, DType::f64)), DTypeError,
                    "scatter_add", "f64", "f32");
  KILN_CHECK_THROWS(index_add(zeros({2}), 0, i64s({0}), zeros({1}, DType::i64)), DTypeError,
                    "index_add", "i64", "f32");
}

BOOST_AUTO_TEST_CASE(index_arguments_must_have_an_integer_dtype) {
  Tensor x = zeros({3, 4});
  KILN_CHECK_THROWS(gather(x, 1, zeros({3, 1})), DTypeError, "gather", "f32");
  KILN_CHECK_THROWS(index_select(x, 0, f64s({0})), DTypeError, "index_select", "f64");
  KILN_CHECK_THROWS(scatter_add(x, 0, bools({true}, {1, 1}), x), DTypeError, "scatter_add", "bool");
  KILN_CHECK_THROWS(index_add(x, 0, f32s({0}), zeros({1, 4})), DTypeError, "index_add", "f32");
  KILN_CHECK_THROWS(embedding(x, f32s({0, 1})), DTypeError, "embedding", "f32");
  KILN_CHECK_THROWS(cross_entropy(x, f32s({0, 1, 2})), DTypeError, "cross_entropy", "f32");
}

BOOST_AUTO_TEST_CASE(index_values_out_of_range_are_rejected) {
  Tensor x = zeros({3, 4});
  KILN_CHECK_THROWS(gather(x, 1, i64s({0, 5, 0}, {3, 1})), IndexError, "gather", "5", "4");
  KILN_CHECK_THROWS(gather(x, 0, i64s({-1}, {1, 1})), IndexError, "gather", "-1", "3");
  KILN_CHECK_THROWS(index_select(x, 0, i64s({0, 3})), IndexError, "index_select", "3");
  KILN_CHECK_THROWS(index_select(x, 1, i64s({-1})), IndexError, "index_select", "-1", "4");
  KILN_CHECK_THROWS(scatter_add(x, 1, i64s({4}, {1, 1}), x), IndexError, "scatter_add", "4");
  KILN_CHECK_THROWS(index_add(x, 0, i64s({7}), zeros({1, 4})), IndexError, "index_add", "7", "3");
  KILN_CHECK_THROWS(cross_entropy(x, i64s({0, 4, 1})), IndexError, "cross_entropy", "4");
  KILN_CHECK_THROWS(cross_entropy(x, i64s({0, -5, 1})), IndexError, "cross_entropy", "-5");
  KILN_CHECK_THROWS(cross_entropy(zeros({3}), i64s({3}, {})), IndexError, "cross_entropy", "3");
}

BOOST_AUTO_TEST_CASE(embedding_names_itself_when_an_index_is_out_of_range) {
  KILN_CHECK_THROWS(embedding(zeros({4, 2}), i64s({1, 7}, {1, 2})), IndexError, "embedding", "7",
                    "4");
}

BOOST_AUTO_TEST_CASE(index_ops_reject_mismatched_shapes) {
  Tensor x = zeros({3, 4});
  KILN_CHECK_THROWS(gather(x, 0, i64s({0}, {1})), ShapeError, "gather", "[1]", "[3, 4]");
  KILN_CHECK_THROWS(gather(x, 0, zeros({1, 5}, DType::i64)), ShapeError, "gather", "[1, 5]",
                    "[3, 4]");
  KILN_CHECK_THROWS(index_select(x, 0, zeros({1, 1}, DType::i64)), ShapeError, "index_select",
                    "[1, 1]");
  KILN_CHECK_THROWS(index_add(x, 0, i64s({0, 1}), zeros({2, 5})), ShapeError, "index_add", "[2, 5]",
                    "[2, 4]");
  KILN_CHECK_THROWS(scatter_add(x, 0, zeros({2, 2}, DType::i64), zeros({1, 2})), ShapeError,
                    "scatter_add", "[2, 2]", "[1, 2]");
  KILN_CHECK_THROWS(embedding(zeros({4}), i64s({0})), ShapeError, "embedding", "[4]");
  KILN_CHECK_THROWS(cross_entropy(x, i64s({0, 1})), ShapeError, "cross_entropy", "[3, 4]", "[2]");
  KILN_CHECK_THROWS(pad(x, {1}), ShapeError, "pad", "1");
  KILN_CHECK_THROWS(pad(x, {1, 1, 1, 1, 1, 1}), ShapeError, "pad", "2");
  // Negative amounts crop, but not below size 0.
  KILN_CHECK_THROWS(pad(x, {-3, -2}), ShapeError, "pad", "-3", "[3, 4]");
}

BOOST_AUTO_TEST_CASE(cat_and_stack_reject_mismatched_tensors) {
  Tensor a = zeros({2, 3}), b = zeros({2, 4});
  KILN_CHECK_THROWS(cat({a, b}), ShapeError, "cat", "[2, 4]", "[2, 3]");
  KILN_CHECK_THROWS(cat({a, zeros({2, 3, 1})}, 1), ShapeError, "cat", "[2, 3, 1]", "[2, 3]");
  KILN_CHECK_THROWS(cat({}), ShapeError, "cat");
  KILN_CHECK_THROWS(cat({scalar_tensor(1), scalar_tensor(2)}), ShapeError, "cat",
                    "zero-dimensional");
  KILN_CHECK_THROWS(stack({a, b}), ShapeError, "stack", "[2, 4]", "[2, 3]");
  KILN_CHECK_THROWS(stack({}), ShapeError, "stack");
}

BOOST_AUTO_TEST_CASE(reshape_view_and_expand_reject_invalid_shapes) {
  Tensor x = zeros({2, 3});
  KILN_CHECK_THROWS(x.reshape({4, 2}), ShapeError, "reshape", "[4, 2]", "[2, 3]");
  KILN_CHECK_THROWS(x.reshape({-1, -1}), ShapeError, "reshape", "-1");
  KILN_CHECK_THROWS(x.reshape({-1, 4}), ShapeError, "reshape", "[-1, 4]", "[2, 3]");
  KILN_CHECK_THROWS(x.reshape({2, -3}), ShapeError, "reshape", "-3");
  KILN_CHECK_THROWS(x.view({5}), ShapeError, "view", "[5]", "[2, 3]");
  KILN_CHECK_THROWS(x.t().view({6}), ShapeError, "view", "[3, 2]", "[6]");
  KILN_CHECK_THROWS(x.expand({4, 3}), ShapeError, "expand", "[2, 3]", "[4, 3]");
  KILN_CHECK_THROWS(x.expand({3}), ShapeError, "expand", "[2, 3]", "[3]");
  KILN_CHECK_THROWS(x.expand({-1, 2, 3}), ShapeError, "expand", "[2, 3]", "[-1, 2, 3]");
  KILN_CHECK_THROWS(x.permute({0}), ShapeError, "permute", "[2, 3]");
  KILN_CHECK_THROWS(x.permute({1, 1}), IndexError, "permute", "twice");
  KILN_CHECK_THROWS(zeros({2, 3, 4}).t(), ShapeError, "t", "[2, 3, 4]");
  KILN_CHECK_THROWS(x.slice(0, 0, 2, 0), IndexError, "slice", "step");
  KILN_CHECK_THROWS(scalar_tensor(1).slice(0, 0, 1), ShapeError, "slice", "0-d");
}

BOOST_AUTO_TEST_CASE(select_rejects_an_index_out_of_range) {
  Tensor x = zeros({3, 4});
  KILN_CHECK_THROWS(x.select(0, 3), IndexError, "select", "3", "[3, 4]");
  KILN_CHECK_THROWS(x.select(1, -5), IndexError, "select", "-5", "[3, 4]");
  KILN_CHECK_THROWS(scalar_tensor(1).select(0, 0), ShapeError, "select", "0-d");
}

BOOST_AUTO_TEST_CASE(item_of_a_multi_element_tensor_is_rejected) {
  KILN_CHECK_THROWS(zeros({2, 3}).item(), ShapeError, "item", "[2, 3]");
  KILN_CHECK_THROWS(zeros({0}).item(), ShapeError, "item", "[0]");
}

BOOST_AUTO_TEST_CASE(normalization_and_losses_check_their_shapes) {
  Tensor x = zeros({2, 4});
  KILN_CHECK_THROWS(layer_norm(x, {5}), ShapeError, "layer_norm", "[5]", "[2, 4]");
  KILN_CHECK_THROWS(layer_norm(x, {4}, zeros({3})), ShapeError, "layer_norm", "weight", "[3]",
                    "[4]");
  KILN_CHECK_THROWS(layer_norm(x, {4}, Tensor(), zeros({2})), ShapeError, "layer_norm", "bias",
                    "[2]");
  KILN_CHECK_THROWS(rms_norm(x, {2, 4, 1}), ShapeError, "rms_norm", "[2, 4, 1]");
  KILN_CHECK_THROWS(cross_entropy(zeros({2, 3, 4}), i64s({0, 1})), ShapeError, "cross_entropy",
                    "[2, 3, 4]");
  KILN_CHECK_THROWS(cross_entropy(zeros({3}), i64s({0})), ShapeError, "cross_entropy", "[3]",
                    "[1]");
}

BOOST_AUTO_TEST_CASE(bad_scalar_arguments_are_rejected) {
  KILN_CHECK_THROWS(pow(i64s({2}), i64s({-1})), Error, "pow", "-1");
  KILN_CHECK_THROWS(dropout(zeros({2}), 1.5), Error, "dropout", "1.5");
  KILN_CHECK_THROWS(dropout(zeros({2}), -0.1), Error, "dropout", "-0.1");
  KILN_CHECK_THROWS(linspace(0, 1, -1), Error, "linspace", "-1");
  KILN_CHECK_THROWS(eye(-2), Error, "eye", "-2");
  KILN_CHECK_THROWS(zeros({2, -1}), ShapeError, "[2, -1]");
  KILN_CHECK_THROWS(add(Tensor(), zeros({1})), Error, "add", "undefined");
}

BOOST_AUTO_TEST_CASE(clamp_and_masked_fill_check_their_arguments) {
  Tensor x = zeros({2, 3});
  KILN_CHECK_THROWS(clamp(x, std::nullopt, std::nullopt), Error, "clamp", "[2, 3]");
  KILN_CHECK_THROWS(clamp(x, Tensor(), Tensor()), Error, "clamp", "[2, 3]");
  KILN_CHECK_THROWS(clamp(x, zeros({4}), Tensor()), ShapeError, "clamp", "[2, 3]", "[4]");
  KILN_CHECK_THROWS(clamp(x, Tensor(), zeros({2, 2})), ShapeError, "clamp", "[2, 3]", "[2, 2]");
  KILN_CHECK_THROWS(clamp(bools({true}, {1}), 0, 1), DTypeError, "clamp", "bool", "[1]");
  KILN_CHECK_THROWS(masked_fill(x, zeros({2, 3}), 1), DTypeError, "masked_fill", "f32", "[2, 3]");
  KILN_CHECK_THROWS(masked_fill(x, bools({true, false, true, false}, {4}), 1), ShapeError,
                    "masked_fill", "[2, 3]", "[4]");
  KILN_CHECK_THROWS(
      masked_fill(zeros({2, 1}), bools({true, false, true, false, true, false}, {2, 3}), 1),
      ShapeError, "masked_fill", "[2, 3]", "[2, 1]");
  KILN_CHECK_THROWS(masked_fill(x, bools({true, false, true}, {3}), zeros({2})), ShapeError,
                    "masked_fill", "[2]");
  // A value an integer tensor cannot hold (PyTorch rejects it; a C++ cast is undefined).
  Tensor m = bools({true}, {1});
  KILN_CHECK_THROWS(masked_fill(i64s({1}), m, NAN), Error, "masked_fill", "nan", "i64", "[1]");
  KILN_CHECK_THROWS(masked_fill(i32s({1}, {1}), m, 3e9), Error, "masked_fill", "3000000000", "i32");
  KILN_CHECK_THROWS(masked_fill(i64s({1}), m, -INFINITY), Error, "masked_fill", "-inf");
}

BOOST_AUTO_TEST_CASE(added_elementwise_ops_reject_bad_dtypes_and_values) {
  Tensor b = bools({true, false}, {2});
  KILN_CHECK_THROWS(floor(b), DTypeError, "floor", "bool");
  KILN_CHECK_THROWS(trunc(b), DTypeError, "trunc", "bool");
  KILN_CHECK_THROWS(square(b), DTypeError, "bool");
  KILN_CHECK_THROWS(remainder(b, b), DTypeError, "remainder", "bool");
  KILN_CHECK_THROWS(floor_divide(b, b), DTypeError, "floor_divide", "bool");
  KILN_CHECK_THROWS(leaky_relu(i32s({1, 2}, {2})), DTypeError, "leaky_relu", "i32", "[2]");
  KILN_CHECK_THROWS(softplus(zeros({2}), 0.0), Error, "softplus", "beta", "0");
  KILN_CHECK_THROWS(floor_divide(i64s({7, 8}), i64s({2, 0})), Error, "floor_divide", "zero", "8");
  KILN_CHECK_THROWS(remainder(i32s({5}, {1}), 0), Error, "remainder", "zero", "5");
  KILN_CHECK_THROWS(tril(zeros({3})), ShapeError, "tril", "[3]");
  KILN_CHECK_THROWS(triu(scalar_tensor(1)), ShapeError, "triu", "[]");
}

BOOST_AUTO_TEST_CASE(added_dim_ops_reject_bad_dims) {
  Tensor x = zeros({2, 3});
  KILN_CHECK_THROWS(cumsum(x, 2), IndexError, "cumsum", "2", "rank 2");
  KILN_CHECK_THROWS(cumsum(x, -3), IndexError, "cumsum", "-3");
  KILN_CHECK_THROWS(cumsum(scalar_tensor(1), 1), IndexError, "cumsum", "1");
  KILN_CHECK_THROWS(max(x, 2), IndexError, "max", "2");
  KILN_CHECK_THROWS(min(x, -3), IndexError, "min", "-3");
  KILN_CHECK_THROWS(max(zeros({3, 0}), 1), IndexError, "max", "size 0", "[3, 0]");
  KILN_CHECK_THROWS(min(zeros({0}), 0), IndexError, "min", "size 0", "[0]");
}

BOOST_AUTO_TEST_CASE(bmm_checks_ranks_batches_and_dtypes) {
  KILN_CHECK_THROWS(bmm(zeros({2, 3}), zeros({2, 3, 4})), ShapeError, "bmm", "[2, 3]", "[2, 3, 4]");
  KILN_CHECK_THROWS(bmm(zeros({2, 3, 4}), zeros({3, 4, 5})), ShapeError, "bmm", "[2, 3, 4]",
                    "[3, 4, 5]");
  KILN_CHECK_THROWS(bmm(zeros({2, 3, 4}), zeros({2, 5, 6})), ShapeError, "bmm", "[2, 3, 4]",
                    "[2, 5, 6]");
  // torch.bmm does not broadcast the batch.
  KILN_CHECK_THROWS(bmm(zeros({1, 3, 4}), zeros({2, 4, 5})), ShapeError, "bmm", "[1, 3, 4]");
  Tensor bb = bools({true}, {1, 1, 1});
  KILN_CHECK_THROWS(bmm(bb, bb), DTypeError, "bmm", "bool");
}

BOOST_AUTO_TEST_CASE(einsum_rejects_bad_equations) {
  Tensor m = zeros({2, 3}), n = zeros({3, 4});
  KILN_CHECK_THROWS(einsum("ij,jk->ik", {m}), Error, "einsum", "ij,jk->ik", "2", "1");
  KILN_CHECK_THROWS(einsum("ij->ij", {}), Error, "einsum", "operand");
  KILN_CHECK_THROWS(einsum("i1,jk->ik", {m, n}), Error, "einsum", "'1'");
  KILN_CHECK_THROWS(einsum("ijk,jk->i", {m, n}), ShapeError, "einsum", "ijk", "[2, 3]");
  KILN_CHECK_THROWS(einsum("ij,kj->ik", {m, n}), ShapeError, "einsum", "'j'", "3", "4");
  KILN_CHECK_THROWS(einsum("ij,jk->iz", {m, n}), Error, "einsum", "'z'");
  KILN_CHECK_THROWS(einsum("ij,jk->ii", {m, n}), Error, "einsum", "'i'", "repeats");
  KILN_CHECK_THROWS(einsum("ii->i", {zeros({3, 3})}), Error, "einsum", "'i'", "diagonal");
  KILN_CHECK_THROWS(einsum("..i.->i", {m}), Error, "einsum", "ellipsis");
  KILN_CHECK_THROWS(einsum("ij->i->j", {m}), Error, "einsum", "ij->i->j");
  Tensor b = bools({true, false}, {1, 2});
  KILN_CHECK_THROWS(einsum("ij,jk->ik", {b, b.transpose(0, 1)}), DTypeError, "einsum", "bool");
}

BOOST_AUTO_TEST_CASE(pad_rejects_bad_amounts_and_over_cropping) {
  Tensor x = zeros({2, 3});
  KILN_CHECK_THROWS(pad(x, {1}), ShapeError, "pad", "[1]");
  KILN_CHECK_THROWS(pad(x, {1, 1, 1, 1, 1, 1}), ShapeError, "pad", "2 dims");
  KILN_CHECK_THROWS(pad(x, {-2, -2}), ShapeError, "pad", "[-2, -2]", "[2, 3]");
  // Cropping more than the dim holds on one side is an error even when the other side pads.
  KILN_CHECK_THROWS(pad(x, {-4, 2}), ShapeError, "pad", "[-4, 2]", "[2, 3]");
  KILN_CHECK_THROWS(pad(x, {3, -5}), ShapeError, "pad", "[3, -5]", "[2, 3]");
  KILN_CHECK_THROWS(pad(x, {0, 0, -3, 1}), ShapeError, "pad", "[0, 0, -3, 1]", "[2, 3]");
  KILN_CHECK_THROWS(pad(i64s({1, 2}), {1, 1}, NAN), Error, "pad", "nan", "i64", "[2]");
  KILN_CHECK_THROWS(pad(i32s({1, 2}, {2}), {1, 1}, -1e10), Error, "pad", "i32");
}

BOOST_AUTO_TEST_SUITE_END()

//===- OnnxImportLinalg.cpp - Det by LU factorization
//----------------------===//
//
// The importer's Det (OnnxImporter.h): Gaussian elimination with partial
// pivoting (LAPACK's getrf, which torch.linalg.det and NumPy call),
// unrolled over the columns at import. Step k picks the row of largest
// magnitude in the working matrix's first column (kiln.argmax), swaps it
// to the top (a one-hot row picked by a product, and the difference of the
// two rows added back as an outer product), multiplies the determinant by
// the pivot (negated where rows swapped), and eliminates below it; the next
// step works on the remaining (n - k - 1)^2 block. Every step is
// differentiable where the pivot order is fixed, as PyTorch's LU-based
// gradient is; a column of zeros makes the determinant 0 (its pivot
// divides as 1). The matrix's order is bounded (kMaxDetOrder): the
// unrolled steps grow with it.
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/OnnxImporter.h"

namespace kiln::cli::onnx_import {

namespace {

// The largest matrix Det unrolls: 64 steps of about 20 ops each.
constexpr int64_t kMaxDetOrder = 64;

} // namespace

bool Importer::det() {
  mlir::Value x;
  if (!floatValue(0, x))
    return false;
  mlir::Type e = element(x);
  llvm::ArrayRef<int64_t> dims = shape(x);
  int64_t rank = dims.size();
  if (rank < 2 || dims[rank - 1] != dims[rank - 2])
    return fail("its input is " + shapeText(dims) +
                ": expected square matrices [..., M, M]");
  int64_t n = dims.back();
  if (n > kMaxDetOrder)
    return fail("its matrices are " + std::to_string(n) + " x " +
                std::to_string(n) +
                ": kiln import unrolls Det's LU "
                "factorization over at most " +
                std::to_string(kMaxDetOrder) + " columns");
  llvm::SmallVector<int64_t> batchDims(dims.begin(), dims.end() - 2);
  int64_t batch = product(batchDims);
  mlir::Value m = g_.reshape(nodeName_ + ".matrices", x, {batch, n, n});
  mlir::Type i64 = b_.getI64Type();
  mlir::Value det;
  for (int64_t k = 0; k < n; ++k) {
    int64_t size = n - k;
    std::string at = ".step" + std::to_string(k);
    // The working matrix's first column, [batch, size].
    mlir::Value column = g_.reshape(
        nodeName_ + at + ".column",
        sliceAxis(m, 2, 0, 1, 1, at + ".first_column"), {batch, size});
    mlir::Value pivot;
    if (size == 1) {
      pivot = g_.reshape(nodeName_ + at + ".pivot", column, {batch});
      det = det ? mul(det, pivot, at + ".det") : pivot;
      break;
    }
    // The pivot row: the first of largest magnitude, as a one-hot [batch,
    // size] in the matrix's type.
    mlir::Value magnitude = b_.create<kiln::AbsOp>(loc(at + ".magnitude"),
                                                   column.getType(), column);
    mlir::Value row =
        b_.create<kiln::ArgmaxOp>(loc(at + ".pivot_row"), type({batch}, i64),
                                  magnitude, b_.getI64IntegerAttr(1));
    mlir::Value hit = b_.create<kiln::CompareOp>(
        loc(at + ".hit"), type({batch, size}, b_.getI1Type()),
        kiln::CompareDirection::eq,
        b_.create<kiln::IotaOp>(loc(at + ".rows"), type({batch, size}, i64),
                                b_.getI64IntegerAttr(1)),
        g_.broadcast(nodeName_ + at + ".pivot_rows", row, {0}, {batch, size}));
    mlir::Value pick = b_.create<kiln::ConvertOp>(loc(at + ".pick"),
                                                  type({batch, size}, e), hit);
    // The pivot row's values and the first row's, [batch, size].
    mlir::Value pivotRow = b_.create<kiln::DotGeneralOp>(
        loc(at + ".pivot_values"), type({batch, size}, e), pick, m, arr({0}),
        arr({0}), arr({1}), arr({1}));
    mlir::Value firstRow =
        g_.reshape(nodeName_ + at + ".first_row",
                   sliceAxis(m, 1, 0, 1, 1, at + ".top"), {batch, size});
    // The determinant takes the pivot, negated where a row swapped (the
    // pick's first element is 0).
    mlir::Value pivotValue = g_.reshape(
        nodeName_ + at + ".pivot",
        sliceAxis(pivotRow, 1, 0, 1, 1, at + ".pivot_first"), {batch});
    mlir::Value stayed =
        g_.reshape(nodeName_ + at + ".stayed",
                   sliceAxis(pick, 1, 0, 1, 1, at + ".pick_first"), {batch});
    mlir::Value sign = sub(mul(stayed, splat(2.0, e, {batch}), at + ".twice"),
                           splat(1.0, e, {batch}), at + ".sign");
    mlir::Value signedPivot = mul(pivotValue, sign, at + ".signed_pivot");
    det = det ? mul(det, signedPivot, at + ".det") : signedPivot;
    // The rows below the pivot after the swap: the pivot's row r (r > 0)
    // becomes the first row, m[1:] + pick[1:] (x) (first - pivot). The
    // first row becomes the pivot row, used below as it is.
    mlir::Value difference = sub(firstRow, pivotRow, at + ".difference");
    mlir::Value pickBelow = sliceAxis(pick, 1, 1, size, 1, at + ".pick_below");
    mlir::Value below = sliceAxis(m, 1, 1, size, 1, at + ".below");
    mlir::Value swapped =
        add(below,
            mul(g_.broadcast(nodeName_ + at + ".pick_rows", pickBelow, {0, 1},
                             {batch, size - 1, size}),
                g_.broadcast(nodeName_ + at + ".difference_rows", difference,
                             {0, 2}, {batch, size - 1, size}),
                at + ".swap_outer"),
            at + ".swapped");
    // Elimination: each row below less its first element over the pivot
    // times the pivot row, on the block right of the first column.
    mlir::Value zero = b_.create<kiln::CompareOp>(
        loc(at + ".zero_pivot"), type({batch}, b_.getI1Type()),
        kiln::CompareDirection::eq, pivotValue, splat(0.0, e, {batch}));
    mlir::Value divisor =
        b_.create<kiln::SelectOp>(loc(at + ".divisor"), pivotValue.getType(),
                                  zero, splat(1.0, e, {batch}), pivotValue);
    mlir::Value leading =
        g_.reshape(nodeName_ + at + ".leading",
                   sliceAxis(swapped, 2, 0, 1, 1, at + ".leading_column"),
                   {batch, size - 1});
    mlir::Value factor = div(leading,
                             g_.broadcast(nodeName_ + at + ".divisor_rows",
                                          divisor, {0}, {batch, size - 1}),
                             at + ".factor");
    mlir::Value pivotRest =
        sliceAxis(pivotRow, 1, 1, size, 1, at + ".pivot_rest");
    mlir::Value block = sliceAxis(swapped, 2, 1, size, 1, at + ".block");
    m = sub(block,
            mul(g_.broadcast(nodeName_ + at + ".factor_rows", factor, {0, 1},
                             {batch, size - 1, size - 1}),
                g_.broadcast(nodeName_ + at + ".pivot_rows_rest", pivotRest,
                             {0, 2}, {batch, size - 1, size - 1}),
                at + ".eliminate_outer"),
            at + ".eliminated");
  }
  setOutput(0, g_.reshape(nodeName_, det, batchDims));
  return true;
}

} // namespace kiln::cli::onnx_import

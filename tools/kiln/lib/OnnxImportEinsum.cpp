//===- OnnxImportEinsum.cpp - Einsum as sums, products and transposes -----===//
//
// The importer's Einsum (OnnxImporter.h). The equation's subscripts label
// each operand's dimensions; a label repeated within one operand takes its
// diagonal first (a gather at constant positions); a label that only one
// operand has and the output lacks is summed at once; the operands are then
// contracted left to right, two at a time: the labels both share are batch
// dimensions of a kiln.dot_general where a later operand or the output needs
// them, and contracted where not (with nothing to contract, a broadcast
// product). A transpose puts the last operand's labels in the output's order.
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/OnnxImporter.h"

#include "llvm/ADT/STLExtras.h"

#include <algorithm>
#include <cctype>

namespace kiln::cli::onnx_import {

namespace {

// A label: a letter's character code, or kEllipsis + k for the k-th of
// the ellipsis's dimensions (aligned on the right, as NumPy broadcasts).
constexpr int kEllipsis = 256;

struct Term {
  std::vector<int> labels; // with kEllipsis standing for "..."
  bool ellipsis = false;
};

bool parseTerm(const std::string &text, Term &term, std::string &error) {
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '.') {
      if (text.compare(i, 3, "...") != 0 || term.ellipsis) {
        error = "'" + text + "' has a '.' outside one '...'";
        return false;
      }
      term.ellipsis = true;
      term.labels.push_back(kEllipsis);
      i += 2;
    } else if (std::isalpha(static_cast<unsigned char>(c))) {
      term.labels.push_back(c);
    } else {
      error = "'" + text + "' has '" + std::string(1, c) + "': expected letters and '...'";
      return false;
    }
  }
  return true;
}

std::string labelText(int label) {
  return label >= kEllipsis ? "the ellipsis's dimension " + std::to_string(label - kEllipsis)
                            : "'" + std::string(1, char(label)) + "'";
}

} // namespace

// Input |i| (|value|, its dimensions labelled |labels|) with a label that
// repeats replaced by its diagonal: the dimensions of one label (of equal
// sizes) become one, at the first's place, holding the elements where
// their indices are equal ("ii->i", "bii->bi"). One kiln.gather from the
// operand as a column of its elements at constant flat positions; the
// gradient scatters back into the diagonal.
bool Importer::diagonal(size_t i, mlir::Value &value,
                        std::vector<int> &labels) {
  std::vector<int> kept;
  llvm::ArrayRef<int64_t> dims = shape(value);
  llvm::SmallVector<int64_t> keptDims;
  for (size_t d = 0; d < labels.size(); ++d) {
    auto first = llvm::find(kept, labels[d]);
    if (first == kept.end()) {
      kept.push_back(labels[d]);
      keptDims.push_back(dims[d]);
    } else if (keptDims[first - kept.begin()] != dims[d]) {
      return fail("subscript " + labelText(labels[d]) + " repeats in input " +
                  std::to_string(i) + " over dimensions of " +
                  std::to_string(keptDims[first - kept.begin()]) + " and " +
                  std::to_string(dims[d]) + ": a diagonal needs equal sizes");
    }
  }
  if (kept.size() == labels.size())
    return true;
  // The flat position in |value| of each element of the diagonal, in
  // row-major order of the kept dimensions.
  std::vector<int64_t> strides(dims.size(), 1), keptOf(dims.size());
  for (int64_t d = int64_t(dims.size()) - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * dims[d + 1];
  for (size_t d = 0; d < labels.size(); ++d)
    keptOf[d] = llvm::find(kept, labels[d]) - kept.begin();
  Static positions;
  positions.dataType = int32_t(DataType::Int64);
  positions.dims.assign(keptDims.begin(), keptDims.end());
  std::vector<int64_t> index(kept.size(), 0);
  for (int64_t n = product(keptDims); n > 0; --n) {
    int64_t flat = 0;
    for (size_t d = 0; d < labels.size(); ++d)
      flat += index[keptOf[d]] * strides[d];
    positions.values.push_back(double(flat));
    for (int64_t k = int64_t(kept.size()) - 1;
         k >= 0 && ++index[k] == keptDims[k]; --k)
      index[k] = 0;
  }
  std::string at = nodeName_ + ".diagonal" + std::to_string(i);
  mlir::Value column = g_.reshape(at + ".column", value, {product(dims), 1});
  llvm::SmallVector<int64_t> gathered(keptDims.begin(), keptDims.end());
  gathered.push_back(1);
  mlir::Value y =
      b_.create<kiln::GatherOp>(g_.loc(at), type(gathered, element(value)),
                                column, constant(positions, at + ".positions"));
  value = g_.reshape(at + ".result", y, keptDims);
  labels = std::move(kept);
  return true;
}

bool Importer::einsum() {
  std::string equation;
  for (char c : stringAttr("equation", ""))
    if (!std::isspace(static_cast<unsigned char>(c)))
      equation += c;
  if (equation.empty())
    return fail("has no equation");
  size_t arrow = equation.find("->");
  std::string lhs = equation.substr(0, arrow);
  std::vector<Term> terms;
  std::string error;
  for (size_t start = 0;;) {
    size_t comma = lhs.find(',', start);
    Term t;
    if (!parseTerm(lhs.substr(start, comma == std::string::npos ? std::string::npos
                                                                 : comma - start),
                   t, error))
      return fail("equation " + error);
    terms.push_back(std::move(t));
    if (comma == std::string::npos)
      break;
    start = comma + 1;
  }
  if (terms.size() != node_->inputs.size())
    return fail("equation '" + equation + "' has " + std::to_string(terms.size()) +
                " operands and the node " + std::to_string(node_->inputs.size()) +
                " inputs");

  // The operands with their labels, the ellipsis expanded.
  struct Operand {
    mlir::Value value;
    std::vector<int> labels;
  };
  std::vector<Operand> operands;
  int64_t ellipsisRank = 0;
  for (size_t i = 0; i < terms.size(); ++i) {
    mlir::Value v;
    if (!value(i, v))
      return false;
    if (!operands.empty() && element(v) != element(operands[0].value))
      return fail("its inputs have different element types");
    int64_t rank = shape(v).size();
    int64_t letters = terms[i].labels.size() - (terms[i].ellipsis ? 1 : 0);
    if (terms[i].ellipsis ? rank < letters : rank != letters)
      return fail("input " + std::to_string(i) + " is " + shapeText(shape(v)) +
                  " and its subscripts have " + std::to_string(letters) + " letters" +
                  (terms[i].ellipsis ? " and '...'" : ""));
    if (terms[i].ellipsis)
      ellipsisRank = std::max(ellipsisRank, rank - letters);
    operands.push_back({v, {}});
  }
  for (size_t i = 0; i < terms.size(); ++i) {
    int64_t own = static_cast<int64_t>(shape(operands[i].value).size()) -
                  static_cast<int64_t>(terms[i].labels.size()) + 1;
    for (int label : terms[i].labels) {
      if (label != kEllipsis) {
        operands[i].labels.push_back(label);
        continue;
      }
      for (int64_t k = ellipsisRank - own; k < ellipsisRank; ++k)
        operands[i].labels.push_back(kEllipsis + k);
    }
    if (!diagonal(i, operands[i].value, operands[i].labels))
      return false;
  }

  // Every label's size: the largest of its dimensions, which the others
  // must equal or be 1 (broadcast).
  std::map<int, int64_t> sizes;
  for (size_t i = 0; i < operands.size(); ++i)
    for (size_t d = 0; d < operands[i].labels.size(); ++d) {
      int label = operands[i].labels[d];
      int64_t dim = shape(operands[i].value)[d];
      auto [it, added] = sizes.try_emplace(label, dim);
      if (!added && it->second != dim && it->second != 1 && dim != 1)
        return fail("subscript " + labelText(label) + " is " + std::to_string(it->second) +
                    " in one input and " + std::to_string(dim) + " in input " +
                    std::to_string(i));
      it->second = std::max(it->second, dim);
    }

  // The output's labels: as written, or (no "->") the ellipsis and then
  // the letters used once, in alphabetical order.
  std::vector<int> output;
  if (arrow != std::string::npos) {
    Term t;
    if (!parseTerm(equation.substr(arrow + 2), t, error))
      return fail("equation " + error);
    for (int label : t.labels) {
      if (label == kEllipsis) {
        for (int64_t k = 0; k < ellipsisRank; ++k)
          output.push_back(kEllipsis + k);
        continue;
      }
      if (!sizes.count(label))
        return fail("output subscript " + labelText(label) + " is in no input");
      if (llvm::is_contained(output, label))
        return fail("output subscript " + labelText(label) + " repeats");
      output.push_back(label);
    }
  } else {
    // Letters written once in the whole equation (a diagonal's repeated
    // letter is summed, as NumPy sums "ii" to the trace).
    std::map<int, int> written;
    for (const Term &t : terms)
      for (int label : t.labels)
        ++written[label];
    for (int64_t k = 0; k < ellipsisRank; ++k)
      output.push_back(kEllipsis + k);
    for (const auto &[label, count] : written)
      if (label < kEllipsis && count == 1)
        output.push_back(label);
  }

  // Each operand at every label's full size.
  for (Operand &op : operands) {
    llvm::SmallVector<int64_t> full;
    for (int label : op.labels)
      full.push_back(sizes[label]);
    if (full != shape(op.value))
      op.value = g_.broadcast(nodeName_ + ".broadcast", op.value,
                              llvm::to_vector(llvm::seq<int64_t>(0, full.size())), full);
  }

  mlir::Type e = element(operands[0].value);
  // Sums operand |i|'s labels that neither the output nor another remaining
  // operand has.
  auto sumOwnLabels = [&](size_t i) {
    Operand &op = operands[i];
    llvm::SmallVector<int64_t> reduced, kept;
    std::vector<int> labels;
    for (size_t d = 0; d < op.labels.size(); ++d) {
      int label = op.labels[d];
      bool needed = llvm::is_contained(output, label);
      for (size_t j = 0; j < operands.size() && !needed; ++j)
        needed = j != i && llvm::is_contained(operands[j].labels, label);
      if (needed) {
        kept.push_back(shape(op.value)[d]);
        labels.push_back(label);
      } else {
        reduced.push_back(d);
      }
    }
    if (reduced.empty())
      return;
    op.value = b_.create<kiln::ReduceOp>(loc(".sum" + std::to_string(i)), type(kept, e),
                                         kiln::ReduceKind::sum, op.value, arr(reduced));
    op.labels = labels;
  };
  for (size_t i = 0; i < operands.size(); ++i)
    sumOwnLabels(i);

  int step = 0;
  while (operands.size() > 1) {
    Operand a = operands[0], c = operands[1];
    operands.erase(operands.begin(), operands.begin() + 2);
    std::string suffix = ".product" + std::to_string(step++);
    auto neededLater = [&](int label) {
      if (llvm::is_contained(output, label))
        return true;
      return llvm::any_of(operands, [label](const Operand &o) {
        return llvm::is_contained(o.labels, label);
      });
    };
    llvm::SmallVector<int64_t> lhsBatch, rhsBatch, lhsContract, rhsContract;
    std::vector<int> batch, lhsFree, rhsFree;
    for (size_t d = 0; d < a.labels.size(); ++d) {
      int label = a.labels[d];
      auto in = llvm::find(c.labels, label);
      if (in == c.labels.end()) {
        lhsFree.push_back(label);
      } else if (neededLater(label)) {
        batch.push_back(label);
        lhsBatch.push_back(d);
        rhsBatch.push_back(in - c.labels.begin());
      } else {
        lhsContract.push_back(d);
        rhsContract.push_back(in - c.labels.begin());
      }
    }
    for (int label : c.labels)
      if (!llvm::is_contained(a.labels, label))
        rhsFree.push_back(label);
    std::vector<int> labels = batch;
    labels.insert(labels.end(), lhsFree.begin(), lhsFree.end());
    labels.insert(labels.end(), rhsFree.begin(), rhsFree.end());
    llvm::SmallVector<int64_t> dims;
    for (int label : labels)
      dims.push_back(sizes[label]);
    mlir::Value product;
    if (!lhsContract.empty()) {
      product = b_.create<kiln::DotGeneralOp>(loc(suffix), type(dims, e), a.value, c.value,
                                              arr(lhsBatch), arr(rhsBatch),
                                              arr(lhsContract), arr(rhsContract));
    } else {
      // Nothing to contract: both broadcast to the result's labels and
      // multiplied.
      auto spread = [&](const Operand &op, const std::string &side) {
        // The operand's labels in the result's order, then a broadcast.
        llvm::SmallVector<int64_t> perm, at;
        for (size_t r = 0; r < labels.size(); ++r)
          if (auto it = llvm::find(op.labels, labels[r]); it != op.labels.end()) {
            perm.push_back(it - op.labels.begin());
            at.push_back(r);
          }
        mlir::Value v = op.value;
        if (!llvm::equal(perm, llvm::seq<int64_t>(0, perm.size()))) {
          llvm::SmallVector<int64_t> permuted;
          for (int64_t p : perm)
            permuted.push_back(shape(v)[p]);
          v = b_.create<kiln::TransposeOp>(loc(suffix + side + ".transpose"),
                                           type(permuted, e), v, arr(perm));
        }
        return g_.broadcast(nodeName_ + suffix + side, v, at, dims);
      };
      product = b_.create<kiln::MulOp>(loc(suffix), type(dims, e), spread(a, ".lhs"),
                                       spread(c, ".rhs"));
    }
    operands.insert(operands.begin(), Operand{product, labels});
    sumOwnLabels(0);
  }

  // The output's order.
  Operand &last = operands[0];
  llvm::SmallVector<int64_t> perm;
  for (int label : output)
    perm.push_back(llvm::find(last.labels, label) - last.labels.begin());
  mlir::Value y = last.value;
  if (!llvm::equal(perm, llvm::seq<int64_t>(0, perm.size()))) {
    llvm::SmallVector<int64_t> dims;
    for (int label : output)
      dims.push_back(sizes[label]);
    y = b_.create<kiln::TransposeOp>(loc(), type(dims, e), y, arr(perm));
  }
  setOutput(0, y);
  return true;
}

} // namespace kiln::cli::onnx_import

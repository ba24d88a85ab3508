//===- NN.cpp - reference semantics of neural-network composites ----------===//
//
// softmax, log_softmax, layer_norm, scatter_add, dropout and
// softmax_cross_entropy, attention and attention_grad (and their packed
// forms attention_qkv and attention_qkv_grad), as ir/KilnOps.td
// describes them, computed in double and rounded once by the interpreter. The softmax family subtracts the
// maximum first (log_softmax = x - max - log(sum(exp(x - max)))), so large
// logits do not overflow. layer_norm takes the mean first and then the
// biased variance of the centred values (two passes, no cancellation).
// Dropout's mask follows the bit recipe written out in ir/reference/Philox.h.
// Attention takes the row maximum of the visible scores before the
// exponentials, and attention_grad recomputes the probabilities from the lse
// operand, as a fused kernel does. An index or label out of range is an error
// naming the index, where it was found and the valid range.
//
//===----------------------------------------------------------------------===//

#include "ir/KilnOps.h"
#include "ir/reference/Philox.h"
#include "ir/reference/Support.h"

#include <algorithm>
#include <cmath>
#include <vector>

using namespace mlir;

namespace kiln {
using namespace reference;

namespace {

// Evaluates softmax (|logOutput| false) or log_softmax along |dim|.
void softmaxAlong(const HostTensor &x, int64_t dim, bool logOutput,
                  HostTensor &y) {
  AroundDim split = splitAround(x.shape(), dim);
  for (int64_t o = 0; o < split.outer; ++o)
    for (int64_t i = 0; i < split.inner; ++i) {
      int64_t base = o * split.size * split.inner + i;
      auto at = [&](int64_t k) { return base + k * split.inner; };
      double max = -INFINITY;
      for (int64_t k = 0; k < split.size; ++k)
        max = std::isnan(x[at(k)]) ? x[at(k)] : std::max(max, x[at(k)]);
      double sum = 0;
      for (int64_t k = 0; k < split.size; ++k)
        sum += std::exp(x[at(k)] - max);
      double logSum = std::log(sum);
      for (int64_t k = 0; k < split.size; ++k)
        y[at(k)] = logOutput ? x[at(k)] - max - logSum
                             : std::exp(x[at(k)] - max) / sum;
    }
}

int64_t product(ArrayRef<int64_t> dims) {
  int64_t p = 1;
  for (int64_t d : dims)
    p *= d;
  return p;
}

// The sizes of one attention problem and its causal visibility.
struct AttentionDims {
  int64_t batchHeads, qLen, kvLen, headDim, valueDim;
  bool causal;

  AttentionDims(const HostTensor &q, const HostTensor &v, bool causal)
      : batchHeads(q.dim(0) * q.dim(1)), qLen(q.dim(2)), kvLen(v.dim(2)),
        headDim(q.dim(3)), valueDim(v.dim(3)), causal(causal) {}
  // Keys [0, visible(i)) are visible to query i (top-left aligned mask).
  int64_t visible(int64_t i) const {
    return causal ? std::min(i + 1, kvLen) : kvLen;
  }
};

// scale * q_i . k_j of head |bh|.
double attentionScore(const HostTensor &q, const HostTensor &k,
                      const AttentionDims &a, double scale, int64_t bh,
                      int64_t i, int64_t j) {
  const double *qi = q.values().data() + (bh * a.qLen + i) * a.headDim;
  const double *kj = k.values().data() + (bh * a.kvLen + j) * a.headDim;
  double dot = 0;
  for (int64_t d = 0; d < a.headDim; ++d)
    dot += qi[d] * kj[d];
  return scale * dot;
}

// kiln.attention on [B, H, T, D] tensors: accumulates into the zeroed
// |out| and sets |lse|.
void attentionForward(const HostTensor &q, const HostTensor &k,
                      const HostTensor &v, double scale, bool causal,
                      HostTensor &out, HostTensor &lse) {
  AttentionDims a(q, v, causal);
  std::vector<double> s(a.kvLen);
  for (int64_t bh = 0; bh < a.batchHeads; ++bh)
    for (int64_t i = 0; i < a.qLen; ++i) {
      int64_t visible = a.visible(i);
      double max = -INFINITY;
      for (int64_t j = 0; j < visible; ++j) {
        s[j] = attentionScore(q, k, a, scale, bh, i, j);
        max = std::isnan(s[j]) ? s[j] : std::max(max, s[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j < visible; ++j)
        sum += std::exp(s[j] - max);
      double rowLse = max + std::log(sum);
      int64_t row = bh * a.qLen + i;
      lse[row] = rowLse;
      double *o = out.values().data() + row * a.valueDim;
      for (int64_t j = 0; j < visible; ++j) {
        double p = std::exp(s[j] - rowLse);
        const double *vj = v.values().data() + (bh * a.kvLen + j) * a.valueDim;
        for (int64_t e = 0; e < a.valueDim; ++e)
          o[e] += p * vj[e];
      }
    }
}

// kiln.attention_grad on [B, H, T, D] tensors: accumulates into the zeroed
// |dq|, |dk| and |dv|.
void attentionBackward(const HostTensor &q, const HostTensor &k,
                       const HostTensor &v, const HostTensor &out,
                       const HostTensor &lse, const HostTensor &dout,
                       double scale, bool causal, HostTensor &dq,
                       HostTensor &dk, HostTensor &dv) {
  AttentionDims a(q, v, causal);
  for (int64_t bh = 0; bh < a.batchHeads; ++bh)
    for (int64_t i = 0; i < a.qLen; ++i) {
      int64_t row = bh * a.qLen + i;
      const double *doi = dout.values().data() + row * a.valueDim;
      const double *oi = out.values().data() + row * a.valueDim;
      double rowD = 0;
      for (int64_t e = 0; e < a.valueDim; ++e)
        rowD += doi[e] * oi[e];
      const double *qi = q.values().data() + row * a.headDim;
      double *dqi = dq.values().data() + row * a.headDim;
      for (int64_t j = 0, visible = a.visible(i); j < visible; ++j) {
        int64_t key = bh * a.kvLen + j;
        double p = std::exp(attentionScore(q, k, a, scale, bh, i, j) - lse[row]);
        const double *vj = v.values().data() + key * a.valueDim;
        double *dvj = dv.values().data() + key * a.valueDim;
        double dp = 0;
        for (int64_t e = 0; e < a.valueDim; ++e) {
          dp += doi[e] * vj[e];
          dvj[e] += p * doi[e];
        }
        double ds = p * (dp - rowD);
        const double *kj = k.values().data() + key * a.headDim;
        double *dkj = dk.values().data() + key * a.headDim;
        for (int64_t d = 0; d < a.headDim; ++d) {
          dqi[d] += scale * ds * kj[d];
          dkj[d] += scale * ds * qi[d];
        }
      }
    }
}

// Part |part| (0 q, 1 k, 2 v) of a packed [B, T, 3, H, D] tensor as
// [B, H, T, D].
HostTensor unpackHeads(const HostTensor &qkv, int64_t part) {
  int64_t B = qkv.dim(0), T = qkv.dim(1), H = qkv.dim(3), D = qkv.dim(4);
  HostTensor x(qkv.dtype(), {B, H, T, D});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t d = 0; d < D; ++d)
          x[((b * H + h) * T + t) * D + d] =
              qkv[(((b * T + t) * 3 + part) * H + h) * D + d];
  return x;
}

// Swaps dimensions 1 and 2 of a rank-4 tensor ([B, H, T, D] <-> [B, T, H, D]).
HostTensor swapHeadsAndTokens(const HostTensor &x) {
  int64_t B = x.dim(0), P = x.dim(1), Q = x.dim(2), D = x.dim(3);
  HostTensor y(x.dtype(), {B, Q, P, D});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t p = 0; p < P; ++p)
      for (int64_t q = 0; q < Q; ++q)
        for (int64_t d = 0; d < D; ++d)
          y[((b * Q + q) * P + p) * D + d] = x[((b * P + p) * Q + q) * D + d];
  return y;
}

} // namespace

LogicalResult SoftmaxOp::evaluate(ArrayRef<HostTensor> operands,
                                  SmallVectorImpl<HostTensor> &results) {
  if (failed(checkOperands(*this, operands)))
    return failure();
  FailureOr<HostTensor> result = makeResult(*this);
  if (failed(result))
    return failure();
  softmaxAlong(operands[0], getDimension(), /*logOutput=*/false, *result);
  results.push_back(std::move(*result));
  return success();
}

LogicalResult LogSoftmaxOp::evaluate(ArrayRef<HostTensor> operands,
                                     SmallVectorImpl<HostTensor> &results) {
  if (failed(checkOperands(*this, operands)))
    return failure();
  FailureOr<HostTensor> result = makeResult(*this);
  if (failed(result))
    return failure();
  softmaxAlong(operands[0], getDimension(), /*logOutput=*/true, *result);
  results.push_back(std::move(*result));
  return success();
}

LogicalResult LayerNormOp::evaluate(ArrayRef<HostTensor> operands,
                                    SmallVectorImpl<HostTensor> &results) {
  if (failed(checkOperands(*this, operands)))
    return failure();
  FailureOr<HostTensor> result = makeResult(*this);
  if (failed(result))
    return failure();
  const HostTensor &x = operands[0], &scale = operands[1], &bias = operands[2];
  int64_t inner = product(x.shape().drop_front(getAxis()));
  int64_t outer = inner == 0 ? 0 : x.size() / inner;
  double epsilon = getEpsilon().convertToDouble();
  for (int64_t o = 0; o < outer; ++o) {
    const double *row = x.values().data() + o * inner;
    double *out = result->values().data() + o * inner;
    double mean = 0;
    for (int64_t j = 0; j < inner; ++j)
      mean += row[j];
    mean /= static_cast<double>(inner);
    double variance = 0;
    for (int64_t j = 0; j < inner; ++j)
      variance += (row[j] - mean) * (row[j] - mean);
    variance /= static_cast<double>(inner);
    double invStd = 1.0 / std::sqrt(variance + epsilon);
    for (int64_t j = 0; j < inner; ++j)
      out[j] = (row[j] - mean) * invStd * scale[j] + bias[j];
  }
  results.push_back(std::move(*result));
  return success();
}

LogicalResult ScatterAddOp::evaluate(ArrayRef<HostTensor> operands,
                                     SmallVectorImpl<HostTensor> &results) {
  if (failed(checkOperands(*this, operands)))
    return failure();
  FailureOr<HostTensor> result = makeResult(*this);
  if (failed(result))
    return failure();
  const HostTensor &operand = operands[0], &indices = operands[1],
                   &updates = operands[2];
  int64_t rows = operand.dim(0);
  int64_t rowSize = product(operand.shape().drop_front());
  ReduceKind kind = getCombineKind();
  result->values() = operand.values();
  double *out = result->values().data();
  // Integer products wrap in 64 bits, as the kernels' i64 accumulators do.
  bool wrapping = kind == ReduceKind::prod && !isFloat(result->dtype());
  std::vector<uint64_t> wrapped;
  if (wrapping)
    for (double v : operand.values())
      wrapped.push_back(toWrapped(v));
  for (int64_t s = 0; s < indices.size(); ++s) {
    int64_t index = static_cast<int64_t>(indices[s]);
    if (index < 0 || index >= rows)
      return emitOpError() << "index " << index << " at position "
                           << formatIndex(unravel(s, indices.shape()))
                           << " of indices is out of range: the operand has "
                           << rows << " rows, so indices must lie in [0, "
                           << rows << ")";
    const double *update = updates.values().data() + s * rowSize;
    double *row = out + index * rowSize;
    for (int64_t j = 0; j < rowSize; ++j) {
      if (kind == ReduceKind::sum)
        row[j] += update[j];
      else if (wrapping)
        wrapped[index * rowSize + j] *= toWrapped(update[j]);
      else if (kind == ReduceKind::prod)
        row[j] *= update[j];
      else if (std::isnan(row[j]) || std::isnan(update[j]))
        row[j] = std::nan(""); // a NaN wins, as in kiln.max
      else
        row[j] = kind == ReduceKind::max ? std::max(row[j], update[j])
                                         : std::min(row[j], update[j]);
    }
  }
  for (size_t e = 0; e < wrapped.size(); ++e)
    out[e] = fromWrapped(result->dtype(), wrapped[e]);
  results.push_back(std::move(*result));
  return success();
}

LogicalResult DropoutOp::evaluate(ArrayRef<HostTensor> operands,
                                  SmallVectorImpl<HostTensor> &results) {
  if (failed(checkOperands(*this, operands)))
    return failure();
  FailureOr<HostTensor> result = makeResult(*this);
  if (failed(result))
    return failure();
  const HostTensor &x = operands[0];
  int64_t counter = static_cast<int64_t>(operands[1][0]);
  int64_t seed = static_cast<int64_t>(getSeed());
  double rate = getRate().convertToDouble();
  double scale = 1.0 / (1.0 - rate);
  for (int64_t i = 0; i < x.size(); ++i)
    (*result)[i] =
        philox::dropoutUniform(seed, counter, i) >= rate ? x[i] * scale : 0.0;
  results.push_back(std::move(*result));
  return success();
}

LogicalResult RandomUniformOp::evaluate(ArrayRef<HostTensor> operands,
                                        SmallVectorImpl<HostTensor> &results) {
  if (failed(checkOperands(*this, operands)))
    return failure();
  FailureOr<HostTensor> result = makeResult(*this);
  if (failed(result))
    return failure();
  int64_t counter = static_cast<int64_t>(operands[0][0]);
  int64_t seed = static_cast<int64_t>(getSeed());
  for (int64_t i = 0; i < result->size(); ++i)
    (*result)[i] =
        roundTo(result->dtype(), philox::dropoutUniform(seed, counter, i));
  results.push_back(std::move(*result));
  return success();
}

LogicalResult SoftmaxCrossEntropyOp::evaluate(ArrayRef<HostTensor> operands,
                                              SmallVectorImpl<HostTensor> &results) {
  if (failed(checkOperands(*this, operands)))
    return failure();
  FailureOr<HostTensor> result = makeResult(*this);
  if (failed(result))
    return failure();
  const HostTensor &logits = operands[0], &labels = operands[1];
  int64_t n = logits.dim(0), classes = logits.dim(1);
  for (int64_t r = 0; r < n; ++r) {
    int64_t label = static_cast<int64_t>(labels[r]);
    if (label < 0 || label >= classes)
      return emitOpError() << "label " << label << " at position [" << r
                           << "] is out of range: the logits have " << classes
                           << " classes, so labels must lie in [0, " << classes
                           << ")";
    const double *row = logits.values().data() + r * classes;
    double max = -INFINITY;
    for (int64_t c = 0; c < classes; ++c)
      max = std::isnan(row[c]) ? row[c] : std::max(max, row[c]);
    double sum = 0;
    for (int64_t c = 0; c < classes; ++c)
      sum += std::exp(row[c] - max);
    (*result)[r] = max + std::log(sum) - row[label];
  }
  results.push_back(std::move(*result));
  return success();
}

LogicalResult AttentionOp::evaluate(ArrayRef<HostTensor> operands,
                                    SmallVectorImpl<HostTensor> &results) {
  if (failed(checkOperands(*this, operands)))
    return failure();
  FailureOr<HostTensor> out = makeResult(*this, 0);
  FailureOr<HostTensor> lse = makeResult(*this, 1);
  if (failed(out) || failed(lse))
    return failure();
  attentionForward(operands[0], operands[1], operands[2],
                   getScale().convertToDouble(), getCausal(), *out, *lse);
  results.push_back(std::move(*out));
  results.push_back(std::move(*lse));
  return success();
}

LogicalResult AttentionGradOp::evaluate(ArrayRef<HostTensor> operands,
                                        SmallVectorImpl<HostTensor> &results) {
  if (failed(checkOperands(*this, operands)))
    return failure();
  FailureOr<HostTensor> dq = makeResult(*this, 0);
  FailureOr<HostTensor> dk = makeResult(*this, 1);
  FailureOr<HostTensor> dv = makeResult(*this, 2);
  if (failed(dq) || failed(dk) || failed(dv))
    return failure();
  attentionBackward(operands[0], operands[1], operands[2], operands[3],
                    operands[4], operands[5], getScale().convertToDouble(),
                    getCausal(), *dq, *dk, *dv);
  results.push_back(std::move(*dq));
  results.push_back(std::move(*dk));
  results.push_back(std::move(*dv));
  return success();
}

LogicalResult AttentionQkvOp::evaluate(ArrayRef<HostTensor> operands,
                                       SmallVectorImpl<HostTensor> &results) {
  if (failed(checkOperands(*this, operands)))
    return failure();
  FailureOr<HostTensor> lse = makeResult(*this, 1);
  if (failed(lse))
    return failure();
  const HostTensor &qkv = operands[0];
  HostTensor q = unpackHeads(qkv, 0), k = unpackHeads(qkv, 1),
             v = unpackHeads(qkv, 2);
  HostTensor out(qkv.dtype(), q.shape());
  attentionForward(q, k, v, getScale().convertToDouble(), getCausal(), out, *lse);
  results.push_back(swapHeadsAndTokens(out));
  results.push_back(std::move(*lse));
  return success();
}

LogicalResult AttentionQkvGradOp::evaluate(ArrayRef<HostTensor> operands,
                                           SmallVectorImpl<HostTensor> &results) {
  if (failed(checkOperands(*this, operands)))
    return failure();
  FailureOr<HostTensor> dqkv = makeResult(*this, 0);
  if (failed(dqkv))
    return failure();
  const HostTensor &qkv = operands[0];
  HostTensor q = unpackHeads(qkv, 0), k = unpackHeads(qkv, 1),
             v = unpackHeads(qkv, 2);
  HostTensor dq(qkv.dtype(), q.shape()), dk(qkv.dtype(), q.shape()),
      dv(qkv.dtype(), q.shape());
  attentionBackward(q, k, v, swapHeadsAndTokens(operands[1]), operands[2],
                    swapHeadsAndTokens(operands[3]), getScale().convertToDouble(),
                    getCausal(), dq, dk, dv);
  int64_t B = qkv.dim(0), T = qkv.dim(1), H = qkv.dim(3), D = qkv.dim(4);
  const HostTensor *parts[3] = {&dq, &dk, &dv};
  for (int64_t part = 0; part < 3; ++part)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t d = 0; d < D; ++d)
            (*dqkv)[(((b * T + t) * 3 + part) * H + h) * D + d] =
                (*parts[part])[((b * H + h) * T + t) * D + d];
  results.push_back(std::move(*dqkv));
  return success();
}

} // namespace kiln

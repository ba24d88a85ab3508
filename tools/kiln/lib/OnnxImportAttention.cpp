//===- OnnxImportAttention.cpp - Attention and RotaryEmbedding ------------===//
//
// The importer's Attention (OnnxImporter.h), which PyTorch's torch.export
// exporter writes for F.scaled_dot_product_attention from opset 23 on.
// Where it is plain scaled-dot-product attention (4-D inputs, as many key
// heads as query heads, no mask but is_causal without a cache, no softcap,
// no sliding window) it is one kiln.attention, which --target=cuda runs as
// one fused kernel and kiln-decompose expands elsewhere. Otherwise it is
// decomposed as onnx.reference computes it: 3-D inputs split into heads,
// the past keys and values concatenated in front (the present outputs),
// each key head repeated for its group of query heads, the scores q . k
// times scale, softcapped, the masks applied (a boolean attn_mask selects,
// a float one adds; is_causal and the sliding window are aligned after
// the cache: key j is visible to query i when j <= i + past length, or +
// nonpad_kv_seqlen[b] - Sq), a softmax over the keys (a fully masked row
// gives zeros) and the product with the values.
//
//===----------------------------------------------------------------------===//

#include "tools/kiln/lib/OnnxImporter.h"

#include <cmath>
#include <limits>

namespace kiln::cli::onnx_import {

bool Importer::attention() {
  mlir::Value q, k, v;
  if (!value(0, q) || !value(1, k) || !value(2, v))
    return false;
  mlir::Type e = element(q);
  if (!llvm::isa<mlir::FloatType>(e) || element(k) != e || element(v) != e)
    return fail("Q, K and V are not floating-point of one type");
  size_t rank = shape(q).size();
  if ((rank != 3 && rank != 4) || shape(k).size() != rank ||
      shape(v).size() != rank)
    return fail(
        "Q, K and V are " + shapeText(shape(q)) + ", " + shapeText(shape(k)) +
        " and " + shapeText(shape(v)) +
        ": expected all [B, S, heads * size] or all [B, heads, S, size]");
  if (node_->outputs.size() > 3 && !node_->outputs[3].empty())
    return fail("its qk_matmul_output output is not supported");
  // 3-D inputs: [B, S, heads * size] split into [B, heads, S, size].
  if (rank == 3) {
    int64_t qHeads = intAttr("q_num_heads", 0),
            kvHeads = intAttr("kv_num_heads", 0);
    if (qHeads < 1 || kvHeads < 1)
      return fail(
          "its inputs are 3-D: q_num_heads and kv_num_heads must be given");
    auto split = [&](mlir::Value x, int64_t heads, const std::string &at,
                     mlir::Value &out) {
      llvm::ArrayRef<int64_t> s = shape(x);
      if (s[2] % heads != 0)
        return fail(at + " is " + shapeText(s) +
                    ": its last dimension is not a multiple of " +
                    std::to_string(heads) + " heads");
      mlir::Value r = g_.reshape(nodeName_ + "." + at + "_heads", x,
                                 {s[0], s[1], heads, s[2] / heads});
      out = permute(r, {0, 2, 1, 3}, "." + at + "_heads_first");
      return true;
    };
    if (!split(q, qHeads, "Q", q) || !split(k, kvHeads, "K", k) ||
        !split(v, kvHeads, "V", v))
      return false;
  }
  llvm::ArrayRef<int64_t> sq = shape(q), sk = shape(k), sv = shape(v);
  int64_t batch = sq[0], qHeads = sq[1], qLen = sq[2], size = sq[3];
  if (sk[0] != batch || sv[0] != batch || sk[1] != sv[1] || sk[3] != size ||
      sk[2] != sv[2] || qHeads % sk[1] != 0)
    return fail("Q, K and V are " + shapeText(sq) + ", " + shapeText(sk) +
                " and " + shapeText(sv) +
                " as [B, heads, S, size]: expected one batch, K's size " +
                "Q's, K and V one length and head count, dividing Q's");
  double scale = floatAttr("scale", 0.0);
  if (!node_->attribute("scale"))
    scale = 1.0 / std::sqrt(double(size));
  bool causal = intAttr("is_causal", 0) != 0;
  double softcap = floatAttr("softcap", 0.0);
  int64_t left = intAttr("left_window_size", -1),
          right = intAttr("right_window_size", -1);
  bool hasMask = hasInput(3), hasPast = hasInput(4) || hasInput(5),
       hasNonpad = hasInput(6);
  if (hasInput(4) != hasInput(5))
    return fail("past_key and past_value must be given together");
  if (hasPast && hasNonpad)
    return fail(
        "nonpad_kv_seqlen cannot be combined with past_key and past_value");

  // The cache: past keys and values in front; the present outputs.
  int64_t pastLen = 0;
  if (hasPast) {
    mlir::Value pastK, pastV;
    if (!value(4, pastK) || !value(5, pastV))
      return false;
    if (shape(pastK).size() != 4 || shape(pastK)[0] != batch ||
        shape(pastK)[1] != sk[1] || shape(pastK)[3] != size ||
        shape(pastV) !=
            llvm::ArrayRef<int64_t>{batch, sv[1], shape(pastK)[2], sv[3]})
      return fail("past_key and past_value are " + shapeText(shape(pastK)) +
                  " and " + shapeText(shape(pastV)) +
                  ": expected [B, kv_heads, past, size] of K and V");
    pastLen = shape(pastK)[2];
    auto append = [&](mlir::Value past, mlir::Value now,
                      const std::string &at) {
      llvm::SmallVector<int64_t> dims(shape(now).begin(), shape(now).end());
      dims[2] += pastLen;
      return b_
          .create<kiln::ConcatenateOp>(loc(at), type(dims, e),
                                       mlir::ValueRange{past, now},
                                       b_.getI64IntegerAttr(2))
          .getResult();
    };
    k = append(pastK, k, ".present_key");
    v = append(pastV, v, ".present_value");
  }
  if (node_->outputs.size() > 1 && !node_->outputs[1].empty())
    setOutput(1, k);
  if (node_->outputs.size() > 2 && !node_->outputs[2].empty())
    setOutput(2, v);
  int64_t kvHeads = shape(k)[1], kvLen = shape(k)[2], valueSize = shape(v)[3];

  // Y [B, heads, Sq, value size], merged back to [B, Sq, heads * size]
  // for 3-D inputs.
  auto finish = [&](mlir::Value y) {
    if (rank == 3)
      y = g_.reshape(nodeName_, permute(y, {0, 2, 1, 3}, ".heads_last"),
                     {batch, qLen, qHeads * valueSize});
    setOutput(0, y);
    return true;
  };

  // Plain scaled-dot-product attention: one kiln.attention.
  bool windowed = left >= 0 || right >= 0;
  if (!hasMask && !hasPast && !hasNonpad && softcap <= 0 && !windowed &&
      kvHeads == qHeads)
    return finish(
        b_.create<kiln::AttentionOp>(loc(rank == 3 ? ".attention" : ""), q, k,
                                     v, scale, causal)
            .getOut());

  // Each key and value head repeated for its group of query heads
  // ([h0, h0, h1, h1, ...]).
  if (kvHeads != qHeads) {
    int64_t group = qHeads / kvHeads;
    auto repeat = [&](mlir::Value x, const std::string &at) {
      llvm::ArrayRef<int64_t> s = shape(x);
      mlir::Value wide = g_.broadcast(nodeName_ + at, x, {0, 1, 3, 4},
                                      {s[0], s[1], group, s[2], s[3]});
      return g_.reshape(nodeName_ + at + "_heads", wide,
                        {s[0], s[1] * group, s[2], s[3]});
    };
    k = repeat(k, ".key_groups");
    v = repeat(v, ".value_groups");
  }
  llvm::SmallVector<int64_t> scoreDims = {batch, qHeads, qLen, kvLen};
  mlir::Value scores = b_.create<kiln::DotGeneralOp>(
      loc(".scores"), type(scoreDims, e), q, k, arr({0, 1}), arr({0, 1}),
      arr({3}), arr({3}));
  scores = mul(scores, splat(scale, e, scoreDims), ".scaled");
  if (softcap > 0) {
    mlir::Value over =
        mul(scores, splat(1.0 / softcap, e, scoreDims), ".softcap_in");
    scores =
        mul(b_.create<kiln::TanhOp>(loc(".softcap_tanh"), over.getType(), over),
            splat(softcap, e, scoreDims), ".softcapped");
  }

  // Which keys each query sees: is_causal and the sliding window (after
  // the cache), nonpad_kv_seqlen's padding, a boolean attn_mask; a float
  // attn_mask adds to the scores.
  mlir::Type i1 = b_.getI1Type(), i64 = b_.getI64Type();
  mlir::Value allowed; // [B, heads, Sq, Skv] or null: every key
  auto both = [&](mlir::Value a, mlir::Value c,
                  const std::string &at) -> mlir::Value {
    if (!a)
      return c;
    return b_.create<kiln::SelectOp>(loc(at), a.getType(), a, c, a).getResult();
  };
  bool maybeEmptyRows = false;
  if (causal || windowed || hasNonpad) {
    // j - i against the offset: a constant, or per batch from data.
    mlir::Value diff = sub(
        b_.create<kiln::IotaOp>(loc(".key_position"), type(scoreDims, i64),
                                b_.getI64IntegerAttr(3)),
        b_.create<kiln::IotaOp>(loc(".query_position"), type(scoreDims, i64),
                                b_.getI64IntegerAttr(2)),
        ".key_minus_query");
    mlir::Value offset;
    if (hasNonpad) {
      mlir::Value lens;
      if (!value(6, lens))
        return false;
      if (shape(lens) != llvm::ArrayRef<int64_t>{batch} ||
          !element(lens).isInteger(64))
        return fail("nonpad_kv_seqlen is " + shapeText(shape(lens)) +
                    ": expected INT64 [" + std::to_string(batch) + "]");
      mlir::Value wide =
          g_.broadcast(nodeName_ + ".nonpad", lens, {0}, scoreDims);
      // Keys at or past the batch's length are padding.
      mlir::Value key = b_.create<kiln::IotaOp>(
          loc(".key_index"), type(scoreDims, i64), b_.getI64IntegerAttr(3));
      allowed =
          b_.create<kiln::CompareOp>(loc(".not_padding"), type(scoreDims, i1),
                                     kiln::CompareDirection::lt, key, wide);
      offset = sub(wide, splat(double(qLen), i64, scoreDims), ".offset");
      maybeEmptyRows = true;
    } else {
      offset = splat(double(pastLen), i64, scoreDims);
    }
    if (causal) {
      mlir::Value visible =
          b_.create<kiln::CompareOp>(loc(".causal"), type(scoreDims, i1),
                                     kiln::CompareDirection::le, diff, offset);
      allowed = both(allowed, visible, ".causal_and");
    }
    // The window: -left <= j - (i + offset) <= right.
    mlir::Value relative = sub(diff, offset, ".relative");
    if (left >= 0) {
      mlir::Value near = b_.create<kiln::CompareOp>(
          loc(".left_window"), type(scoreDims, i1), kiln::CompareDirection::ge,
          relative, splat(-double(left), i64, scoreDims));
      allowed = both(allowed, near, ".left_and");
      maybeEmptyRows = true;
    }
    if (right >= 0) {
      mlir::Value near = b_.create<kiln::CompareOp>(
          loc(".right_window"), type(scoreDims, i1), kiln::CompareDirection::le,
          relative, splat(double(right), i64, scoreDims));
      allowed = both(allowed, near, ".right_and");
      maybeEmptyRows = true;
    }
  }
  mlir::Value additive;
  if (hasMask) {
    mlir::Value mask;
    if (!value(3, mask))
      return false;
    llvm::SmallVector<int64_t> ms(shape(mask).begin(), shape(mask).end());
    bool boolean = element(mask).isInteger(1);
    if (!boolean && element(mask) != e)
      return fail("attn_mask is neither BOOL nor of Q's type");
    if (ms.empty() || ms.size() > 4 || ms.back() > kvLen)
      return fail("attn_mask is " + shapeText(ms) +
                  ": expected at most 4 dimensions, the " +
                  "last at most the " + std::to_string(kvLen) + " keys");
    // Shorter than the keys: padded with False (or -infinity) at the end.
    if (ms.back() < kvLen) {
      llvm::SmallVector<int64_t> low(ms.size(), 0), high(ms.size(), 0);
      high.back() = kvLen - ms.back();
      ms.back() = kvLen;
      double fill = boolean ? 0.0 : -std::numeric_limits<double>::infinity();
      mask = b_.create<kiln::PadOp>(loc(".mask_keys"), type(ms, element(mask)),
                                    mask, arr(low), arr(high),
                                    b_.getF64FloatAttr(fill));
    }
    mask = broadcastTo(mask, scoreDims);
    if (boolean)
      allowed = both(allowed, mask, ".mask_and");
    else
      additive = mask;
    maybeEmptyRows = true;
  }
  if (additive)
    scores = add(scores, additive, ".biased");
  mlir::Value lowest =
      splat(-std::numeric_limits<double>::infinity(), e, scoreDims);
  if (allowed)
    scores = b_.create<kiln::SelectOp>(loc(".masked"), scores.getType(),
                                       allowed, scores, lowest);
  // A row that sees no key (its scores all -infinity) gives zeros, as
  // onnx.reference's guard makes it: its scores are made 0 before the
  // softmax (which would give NaN, and NaN gradients) and its
  // probabilities 0 after.
  mlir::Value empty;
  if (maybeEmptyRows) {
    llvm::SmallVector<int64_t> rows = {batch, qHeads, qLen};
    mlir::Value best =
        b_.create<kiln::ReduceOp>(loc(".row_max"), type(rows, e),
                                  kiln::ReduceKind::max, scores, arr({3}));
    empty = g_.broadcast(
        nodeName_ + ".row_empty_keys",
        b_.create<kiln::CompareOp>(
            loc(".row_empty"), type(rows, i1), kiln::CompareDirection::eq, best,
            splat(-std::numeric_limits<double>::infinity(), e, rows)),
        {0, 1, 2}, scoreDims);
    scores =
        b_.create<kiln::SelectOp>(loc(".row_empty_scores"), scores.getType(),
                                  empty, splat(0.0, e, scoreDims), scores);
  }
  mlir::Value p = b_.create<kiln::SoftmaxOp>(loc(".softmax"), scores.getType(),
                                             scores, b_.getI64IntegerAttr(3));
  if (empty)
    p = b_.create<kiln::SelectOp>(loc(".guarded"), p.getType(), empty,
                                  splat(0.0, e, scoreDims), p);
  llvm::SmallVector<int64_t> outDims = {batch, qHeads, qLen, valueSize};
  mlir::Value y = b_.create<kiln::DotGeneralOp>(
      loc(rank == 3 ? ".values" : ""), type(outDims, e), p, v, arr({0, 1}),
      arr({0, 1}), arr({3}), arr({2}));
  return finish(y);
}

// RotaryEmbedding (opset 23): the first rotary_embedding_dim (default all)
// elements of each head rotated in pairs by the angles of its position:
// halves (x1, x2), or with `interleaved` even and odd elements, become
// (cos x1 - sin x2, sin x1 + cos x2). cos_cache and sin_cache are [max
// position, dim / 2] rows picked by position_ids [B, S] (a gather; from
// data or constant), or [B, S, dim / 2] without them. X is [B, heads, S,
// size] or [B, S, heads * size] (num_heads). A cache that is an
// initializer is a constant (a model's rotary table, not a parameter).
bool Importer::rotaryEmbedding() {
  mlir::Value x;
  if (!value(0, x))
    return false;
  mlir::Type e = element(x);
  if (!llvm::isa<mlir::FloatType>(e))
    return fail("X is not floating-point");
  size_t rank = shape(x).size();
  llvm::SmallVector<int64_t> original(shape(x).begin(), shape(x).end());
  if (rank == 4) {
    x = permute(x, {0, 2, 1, 3}, ".sequence_first");
  } else if (rank == 3) {
    int64_t heads = intAttr("num_heads", 0);
    if (heads < 1 || original[2] % heads != 0)
      return fail("X is " + shapeText(original) +
                  ": a 3-D X needs num_heads dividing its " +
                  "last dimension (num_heads is " + std::to_string(heads) +
                  ")");
    x = g_.reshape(nodeName_ + ".heads", x,
                   {original[0], original[1], heads, original[2] / heads});
  } else {
    return fail("X is " + shapeText(original) +
                ": expected [B, heads, S, size] or [B, S, heads * size]");
  }
  llvm::SmallVector<int64_t> sx(shape(x).begin(),
                                shape(x).end()); // [B, S, H, D]
  int64_t batch = sx[0], length = sx[1], heads = sx[2], size = sx[3];
  int64_t dim = intAttr("rotary_embedding_dim", 0);
  if (dim == 0)
    dim = size;
  if (dim < 2 || dim > size || dim % 2 != 0)
    return fail("rotary_embedding_dim is " + std::to_string(dim) +
                ": expected an even number up to the head size " +
                std::to_string(size));
  int64_t half = dim / 2;
  auto cache = [&](size_t i, const char *what, mlir::Value &out) {
    const std::string &name = node_->inputs[i];
    if (statics_.count(name) || parameterTensors_.count(name)) {
      const Static *s = constInput(i);
      if (!s)
        return false;
      out = constant(*s, nodeName_ + "." + what, e);
    } else if (!value(i, out)) {
      return false;
    }
    if (element(out) != e)
      return fail(std::string(what) + " is not of X's type");
    return true;
  };
  mlir::Value cosine, sine;
  if (!hasInput(1) || !hasInput(2) || !cache(1, "cos_cache", cosine) ||
      !cache(2, "sin_cache", sine))
    return hasInput(1) && hasInput(2)
               ? false
               : fail("cos_cache and sin_cache are required");
  llvm::SmallVector<int64_t> angles = {batch, length, half};
  if (hasInput(3)) {
    mlir::Value positions;
    if (!value(3, positions))
      return false;
    if (shape(positions) != llvm::ArrayRef<int64_t>{batch, length} ||
        !llvm::isa<mlir::IntegerType>(element(positions)))
      return fail("position_ids is " + shapeText(shape(positions)) +
                  ": expected integers [" + std::to_string(batch) + ", " +
                  std::to_string(length) + "]");
    for (auto [table, what] :
         {std::pair<mlir::Value *, const char *>{&cosine, "cos_cache"},
          {&sine, "sin_cache"}}) {
      if (shape(*table).size() != 2 || shape(*table)[1] != half)
        return fail(std::string(what) + " is " + shapeText(shape(*table)) +
                    ": expected [positions, " + std::to_string(half) + "]");
      *table = b_.create<kiln::GatherOp>(loc(std::string(".") + what + "_rows"),
                                         type(angles, e), *table, positions);
    }
  } else if (shape(cosine) != llvm::ArrayRef<int64_t>(angles) ||
             shape(sine) != llvm::ArrayRef<int64_t>(angles)) {
    return fail("cos_cache and sin_cache are " + shapeText(shape(cosine)) +
                " and " + shapeText(shape(sine)) +
                " without position_ids: expected " + shapeText(angles));
  }
  llvm::SmallVector<int64_t> part = {batch, length, heads, half};
  cosine = g_.broadcast(nodeName_ + ".cos", cosine, {0, 1, 3}, part);
  sine = g_.broadcast(nodeName_ + ".sin", sine, {0, 1, 3}, part);
  bool interleaved = intAttr("interleaved", 0) != 0;
  mlir::Value rotated = sliceAxis(x, 3, 0, dim, 1, ".rotated");
  mlir::Value x1 = interleaved
                       ? sliceAxis(rotated, 3, 0, dim, 2, ".even")
                       : sliceAxis(rotated, 3, 0, half, 1, ".first_half");
  mlir::Value x2 = interleaved
                       ? sliceAxis(rotated, 3, 1, dim, 2, ".odd")
                       : sliceAxis(rotated, 3, half, dim, 1, ".second_half");
  mlir::Value real =
      sub(mul(cosine, x1, ".cos_x1"), mul(sine, x2, ".sin_x2"), ".real");
  mlir::Value imag =
      add(mul(sine, x1, ".sin_x1"), mul(cosine, x2, ".cos_x2"), ".imag");
  llvm::SmallVector<int64_t> rotatedDims = {batch, length, heads, dim};
  mlir::Value y;
  if (interleaved) {
    y = g_.reshape(nodeName_ + ".pairs", stack({real, imag}, 4, ".pair"),
                   rotatedDims);
  } else {
    y = b_.create<kiln::ConcatenateOp>(loc(".halves"), type(rotatedDims, e),
                                       mlir::ValueRange{real, imag},
                                       b_.getI64IntegerAttr(3));
  }
  if (dim < size)
    y = b_.create<kiln::ConcatenateOp>(
        loc(".kept"), type(sx, e),
        mlir::ValueRange{y, sliceAxis(x, 3, dim, size, 1, ".passed")},
        b_.getI64IntegerAttr(3));
  setOutput(0, rank == 4 ? permute(y, {0, 2, 1, 3}, "")
                         : g_.reshape(nodeName_, y, original));
  return true;
}

} // namespace kiln::cli::onnx_import

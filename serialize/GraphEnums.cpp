//===- GraphEnums.cpp - graph file enums <-> kiln dialect enums -----------===//
//
// One pair table per enum gives both directions, so the two numberings cannot
// drift apart in one direction only; tests/unit/serialize checks that every
// dialect value has a partner.
//
//===----------------------------------------------------------------------===//

#include "serialize/GraphEnums.h"

#include "mlir/IR/BuiltinTypes.h"

using namespace mlir;

namespace kiln::graph {
namespace {

template <typename F, typename K>
struct Pair {
  F fbs;
  K kiln;
};

template <typename F, typename K, size_t N>
std::optional<K> lookupKiln(const Pair<F, K> (&table)[N], F value) {
  for (const Pair<F, K> &p : table)
    if (p.fbs == value)
      return p.kiln;
  return std::nullopt;
}

template <typename F, typename K, size_t N>
F lookupFbs(const Pair<F, K> (&table)[N], K value) {
  for (const Pair<F, K> &p : table)
    if (p.kiln == value)
      return p.fbs;
  // Unreachable while the tables are complete (checked by the unit tests);
  // the first entry keeps the writer well defined regardless.
  return table[0].fbs;
}

const Pair<fbs::Role, Role> kRoles[] = {
    {fbs::Role::Input, Role::input},
    {fbs::Role::Label, Role::label},
    {fbs::Role::Parameter, Role::parameter},
    {fbs::Role::OptimizerState, Role::optimizer_state},
    {fbs::Role::Step, Role::step},
    {fbs::Role::Loss, Role::loss},
    {fbs::Role::Output, Role::output},
    {fbs::Role::Gradient, Role::gradient},
    {fbs::Role::ParameterCopy, Role::parameter_copy},
    {fbs::Role::ModelState, Role::model_state},
};

const Pair<fbs::InitKind, InitKind> kInitKinds[] = {
    {fbs::InitKind::Zeros, InitKind::zeros},
    {fbs::InitKind::Ones, InitKind::ones},
    {fbs::InitKind::Constant, InitKind::constant},
    {fbs::InitKind::Normal, InitKind::normal},
    {fbs::InitKind::Uniform, InitKind::uniform},
    {fbs::InitKind::GlorotUniform, InitKind::glorot_uniform},
    {fbs::InitKind::KaimingNormal, InitKind::kaiming_normal},
};

const Pair<fbs::CompareDirection, CompareDirection> kDirections[] = {
    {fbs::CompareDirection::Eq, CompareDirection::eq},
    {fbs::CompareDirection::Ne, CompareDirection::ne},
    {fbs::CompareDirection::Lt, CompareDirection::lt},
    {fbs::CompareDirection::Le, CompareDirection::le},
    {fbs::CompareDirection::Gt, CompareDirection::gt},
    {fbs::CompareDirection::Ge, CompareDirection::ge},
};

const Pair<fbs::ReduceKind, ReduceKind> kReduceKinds[] = {
    {fbs::ReduceKind::Sum, ReduceKind::sum},
    {fbs::ReduceKind::Max, ReduceKind::max},
    {fbs::ReduceKind::Min, ReduceKind::min},
    {fbs::ReduceKind::Mean, ReduceKind::mean},
    {fbs::ReduceKind::Prod, ReduceKind::prod},
};

const Pair<fbs::GeluApproximation, GeluApproximation> kGeluForms[] = {
    {fbs::GeluApproximation::Erf, GeluApproximation::erf},
    {fbs::GeluApproximation::Tanh, GeluApproximation::tanh},
};

const Pair<fbs::Optimizer, OptimizerKind> kOptimizers[] = {
    {fbs::Optimizer::Sgd, OptimizerKind::sgd},
    {fbs::Optimizer::Momentum, OptimizerKind::momentum},
    {fbs::Optimizer::Adam, OptimizerKind::adam},
    {fbs::Optimizer::AdamW, OptimizerKind::adamw},
};

const Pair<fbs::Schedule, LrSchedule> kSchedules[] = {
    {fbs::Schedule::Constant, LrSchedule::constant},
    {fbs::Schedule::WarmupCosine, LrSchedule::warmup_cosine},
    {fbs::Schedule::WarmupLinear, LrSchedule::warmup_linear},
};

} // namespace

std::optional<fbs::DType> toFbs(Type t) {
  if (t.isF64())
    return fbs::DType::F64;
  if (t.isF32())
    return fbs::DType::F32;
  if (t.isF16())
    return fbs::DType::F16;
  if (t.isBF16())
    return fbs::DType::BF16;
  if (t.isSignlessInteger(64))
    return fbs::DType::I64;
  if (t.isSignlessInteger(32))
    return fbs::DType::I32;
  if (t.isSignlessInteger(8))
    return fbs::DType::I8;
  if (t.isSignlessInteger(1))
    return fbs::DType::I1;
  return std::nullopt;
}

Type toKiln(fbs::DType dtype, MLIRContext *context) {
  Builder b(context);
  switch (dtype) {
  case fbs::DType::F64:
    return b.getF64Type();
  case fbs::DType::F32:
    return b.getF32Type();
  case fbs::DType::F16:
    return b.getF16Type();
  case fbs::DType::BF16:
    return b.getBF16Type();
  case fbs::DType::I64:
    return b.getI64Type();
  case fbs::DType::I32:
    return b.getI32Type();
  case fbs::DType::I8:
    return b.getI8Type();
  case fbs::DType::I1:
    return b.getI1Type();
  }
  return nullptr;
}

unsigned bytesPerElement(fbs::DType dtype) {
  switch (dtype) {
  case fbs::DType::F64:
  case fbs::DType::I64:
    return 8;
  case fbs::DType::F32:
  case fbs::DType::I32:
    return 4;
  case fbs::DType::F16:
  case fbs::DType::BF16:
    return 2;
  case fbs::DType::I8:
  case fbs::DType::I1:
    return 1;
  }
  return 0;
}

std::optional<Role> toKiln(fbs::Role v) { return lookupKiln(kRoles, v); }
fbs::Role toFbs(Role v) { return lookupFbs(kRoles, v); }
std::optional<InitKind> toKiln(fbs::InitKind v) { return lookupKiln(kInitKinds, v); }
fbs::InitKind toFbs(InitKind v) { return lookupFbs(kInitKinds, v); }
std::optional<CompareDirection> toKiln(fbs::CompareDirection v) {
  return lookupKiln(kDirections, v);
}
fbs::CompareDirection toFbs(CompareDirection v) { return lookupFbs(kDirections, v); }
std::optional<ReduceKind> toKiln(fbs::ReduceKind v) { return lookupKiln(kReduceKinds, v); }
fbs::ReduceKind toFbs(ReduceKind v) { return lookupFbs(kReduceKinds, v); }
std::optional<GeluApproximation> toKiln(fbs::GeluApproximation v) {
  return lookupKiln(kGeluForms, v);
}
fbs::GeluApproximation toFbs(GeluApproximation v) { return lookupFbs(kGeluForms, v); }
std::optional<OptimizerKind> toKiln(fbs::Optimizer v) { return lookupKiln(kOptimizers, v); }
fbs::Optimizer toFbs(OptimizerKind v) { return lookupFbs(kOptimizers, v); }
std::optional<LrSchedule> toKiln(fbs::Schedule v) { return lookupKiln(kSchedules, v); }
fbs::Schedule toFbs(LrSchedule v) { return lookupFbs(kSchedules, v); }

} // namespace kiln::graph

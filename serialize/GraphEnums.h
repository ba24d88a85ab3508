//===- GraphEnums.h - graph file enums <-> kiln dialect enums -----*- C++ -*-===//
//
// The graph file numbers its enums itself (serialize/schema/graph.fbs) so the
// format stays stable when the dialect's ODS enums change; these functions
// are the one place where the two numberings meet. Every `toKiln` returns
// nothing for a value the file format does not define (a file from a newer
// writer or a corrupt one), so the importer can name it in an error.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_SERIALIZE_GRAPHENUMS_H
#define KILN_SERIALIZE_GRAPHENUMS_H

#include "ir/KilnDialect.h"
#include "serialize/GraphSchema.h"

#include "mlir/IR/Types.h"

#include <optional>

namespace kiln::graph {

// The format version this build reads and writes (see graph.fbs).
constexpr uint16_t kFormatMajor = 1;
constexpr uint16_t kFormatMinor = 11;

// True when |value| is one of the values |E| declares (all graph enums are
// dense from 0 to MAX).
template <typename E>
bool isKnown(E value) {
  using U = std::underlying_type_t<E>;
  return static_cast<U>(value) <= static_cast<U>(E::MAX);
}

// Element types. Returns nothing for an element type kiln tensors cannot
// hold.
std::optional<fbs::DType> toFbs(mlir::Type elementType);
mlir::Type toKiln(fbs::DType dtype, mlir::MLIRContext *context);
// Bytes per element in the file's raw data (i1 takes one byte).
unsigned bytesPerElement(fbs::DType dtype);

std::optional<Role> toKiln(fbs::Role role); // nothing for None or unknown
fbs::Role toFbs(Role role);

std::optional<InitKind> toKiln(fbs::InitKind kind);
fbs::InitKind toFbs(InitKind kind);

std::optional<CompareDirection> toKiln(fbs::CompareDirection direction);
fbs::CompareDirection toFbs(CompareDirection direction);

std::optional<ReduceKind> toKiln(fbs::ReduceKind kind);
fbs::ReduceKind toFbs(ReduceKind kind);

std::optional<GeluApproximation> toKiln(fbs::GeluApproximation form);
fbs::GeluApproximation toFbs(GeluApproximation form);

std::optional<OptimizerKind> toKiln(fbs::Optimizer optimizer);
fbs::Optimizer toFbs(OptimizerKind optimizer);

std::optional<LrSchedule> toKiln(fbs::Schedule schedule);
fbs::Schedule toFbs(LrSchedule schedule);

} // namespace kiln::graph

#endif // KILN_SERIALIZE_GRAPHENUMS_H

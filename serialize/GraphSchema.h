//===- GraphSchema.h - the generated graph file accessors ---------*- C++ -*-===//
//
// Includes flatc's output for serialize/schema/graph.fbs (namespace
// kiln::fbs). Generated code trips some of LLVM's warnings (a default label
// in a switch that covers every union member); they are silenced here only.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_SERIALIZE_GRAPHSCHEMA_H
#define KILN_SERIALIZE_GRAPHSCHEMA_H

#if defined(__clang__)
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wcovered-switch-default"
#endif
#include "serialize/schema/graph_generated.h"
#if defined(__clang__)
#pragma clang diagnostic pop
#endif

#endif // KILN_SERIALIZE_GRAPHSCHEMA_H

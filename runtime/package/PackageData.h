//===- PackageData.h - data in a package's buffers ---------------*- C++ -*-===//
//
// What every runner of a step package (`kiln train`'s compiled backends,
// kiln-cuda-run) needs to move values in and out of the step's buffers:
// the element type a data batch for an input holds, a batch tensor copied
// into an input's buffer, and elements of any package dtype read or
// written as doubles. One copy, so the runners feed the same input the same
// data.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_PACKAGE_PACKAGEDATA_H
#define KILN_RUNTIME_PACKAGE_PACKAGEDATA_H

#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/data/Sampler.h"
#include "runtime/package/Package.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::runtime {

// The element type of the data fed to an input of |dtype|: f64 for F64,
// f32 for the other floats (halves are rounded from f32 data), i32 for the
// integer and boolean types (indices, token ids, masks: drawn and read as
// integers, then narrowed to I64, I8 or I1 by copyBatchTensor).
ElementType dataElementType(PkgDType dtype);

// Element |i| of a buffer of |dtype| as a double, and the other way
// (halves through runtime/Half.h; I1 is 0 or 1).
double readElement(const void *data, PkgDType dtype, int64_t i);
void writeElement(void *data, PkgDType dtype, int64_t i, double v);
int64_t elementCount(const std::vector<int64_t> &shape);

// The |n| elements of |dtype| at |data| as checkpoint values: f64 for F64,
// else f32.
TensorValues readValues(const void *data, PkgDType dtype, int64_t n);
// Writes |values| to |data| as |dtype| (memcpy when the precision agrees).
void writeValues(void *data, PkgDType dtype, const TensorValues &values);

// Writes the initial value of the parameter |init| initializes into |out|
// (|buffer|'s bytes, |buffer| the package's buffer init.buffer): its data,
// or its initializer's values (runtime/Initializers.h) as the buffer's
// dtype, f16 and bf16 rounded once from the f64 values to nearest even,
// integers rounded to nearest. Both runtimes start a step from it.
void writeInitialValue(const PackageBuffer &buffer, const ParameterInit &init,
                       void *out);

// Copies one batch tensor into the host buffer |dst| of signature input
// |e| (memcpy when the types agree, converted element by element
// otherwise). A count that differs from |e|'s: false and |error| says so.
bool copyBatchTensor(const BatchTensor &src, const SignatureEntry &e, void *dst,
                     std::string &error);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_PACKAGE_PACKAGEDATA_H

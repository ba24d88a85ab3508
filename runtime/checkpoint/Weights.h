//===- Weights.h - parameter values to start training from ------*- C++ -*-===//
//
// `kiln train --init-from=FILE` starts the parameters from values in a file
// instead of their initializers, as PyTorch's load_state_dict does before
// fine-tuning. FILE is one of:
//   - a safetensors file of named tensors, as safetensors.torch.save_file
//     or Hugging Face write them: each floating-point tensor (F32, F64,
//     F16, BF16) is read as f32, F64 as f64 (writing a tensor into the
//     model rounds it to the parameter's own element type);
//   - a kiln checkpoint (kiln-checkpoint-1): its parameters, without the
//     optimizer state, the RNG state or the position;
//   - a ZeRO checkpoint's index (step-K.index.json): the parameters
//     consolidated from its rank files.
// Tensors of other dtypes (an I64 counter, a bool mask) are listed apart,
// so a parameter of that name can be refused with its dtype.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CHECKPOINT_WEIGHTS_H
#define KILN_RUNTIME_CHECKPOINT_WEIGHTS_H

#include "runtime/Status.h"
#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/checkpoint/Safetensors.h"

#include <map>
#include <string>
#include <vector>

namespace kiln::runtime {

struct WeightsFile {
  // The floating-point tensors, as f32 (f64 for F64), in the file's order.
  std::vector<NamedTensor> tensors;
  // Tensors that hold no floating-point values: name -> dtype name.
  std::map<std::string, std::string> otherDtypes;
  // What the file is: "safetensors file", "kiln checkpoint of step K" or
  // "ZeRO checkpoint of step K".
  std::string kind;
};

// The values of a floating-point tensor: f64 for F64, else f32; an error
// for other dtypes.
StatusOr<TensorValues> floatValues(const SafeTensor &tensor);

StatusOr<WeightsFile> loadWeights(const std::string &path);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_CHECKPOINT_WEIGHTS_H

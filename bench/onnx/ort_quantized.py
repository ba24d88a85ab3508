"""Models quantized by ONNX Runtime's own quantizer, imported by kiln, against
ONNX Runtime running them.

  python3 bench/onnx/ort_quantized.py DIR [SEEDS]

Needs torch, onnx and onnxruntime (pip install onnxruntime: a peer for this
benchmark, never a dependency of kiln), and kiln on PATH. For each seed it
builds three PyTorch models, exports each to ONNX (opset 17) and quantizes
it with onnxruntime.quantization:

- cnn-qoperator: a small residual CNN (Conv, ReLU, MaxPool, a residual Add,
  AveragePool, GlobalAveragePool, Gemm), quantize_static in the QOperator
  format (ONNX Runtime writes QLinearConv, QLinearAdd, QLinearAveragePool,
  QLinearGlobalAveragePool, MaxPool of UINT8, QGemm ...), calibrated on 16
  batches;
- cnn-qdq: the same model in the QDQ format;
- mlp-dynamic: an MLP, quantize_dynamic (DynamicQuantizeLinear,
  MatMulInteger, Cast, Mul).

kiln imports each (--loss=mse) and trains one step from its initializers;
the script prints kiln's first loss beside the loss of ONNX Runtime's
outputs on the same batch, and the relative difference. The dynamic MLP
also trains 8 SGD steps, its quantized weights included, against PyTorch
emulating it (train_dynamic), loss for loss. ONNX Runtime's
integer kernels requantize with their own fixed-point arithmetic, so an
output may land one quantization step from kiln's float path; the
difference is reported, not hidden."""

import os
import re
import subprocess
import sys

import numpy as np


def run(*command):
    proc = subprocess.run(command, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout + proc.stderr)
        raise SystemExit(f"failed: {' '.join(command)}")
    return proc.stdout + proc.stderr


def models(torch):
    nn = torch.nn

    class Cnn(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
            self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
            self.conv3 = nn.Conv2d(8, 8, 3, padding=1)
            self.fc = nn.Linear(8, 10)

        def forward(self, x):
            h = torch.max_pool2d(torch.relu(self.conv1(x)), 2)
            r = torch.relu(self.conv3(torch.relu(self.conv2(h))))
            h = torch.nn.functional.avg_pool2d(torch.relu(h + r), 2)
            return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(h, 1), 1))

    class Mlp(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(32, 64)
            self.fc2 = nn.Linear(64, 10)

        def forward(self, x):
            return self.fc2(torch.relu(self.fc1(x)))

    return {"cnn": (Cnn, (4, 3, 16, 16)), "mlp": (Mlp, (4, 32))}


def main(out, seeds):
    import onnx  # noqa: F401
    import onnxruntime as ort
    import torch
    from onnxruntime import quantization as q

    worst = worst_training = 0.0
    for seed in range(seeds):
        torch.manual_seed(seed)
        rng = np.random.default_rng(seed)
        for kind, (cls, shape) in models(torch).items():
            model = cls().eval()
            base = os.path.join(out, f"{kind}-{seed}")
            os.makedirs(base, exist_ok=True)
            float_path = os.path.join(base, "float.onnx")
            torch.onnx.export(model, torch.zeros(shape), float_path, input_names=["x"],
                              output_names=["y"], opset_version=17, dynamo=False)
            calibration = [rng.standard_normal(shape).astype(np.float32) for _ in range(16)]

            class Reader(q.CalibrationDataReader):
                def __init__(self):
                    self.batches = iter(calibration)

                def get_next(self):
                    batch = next(self.batches, None)
                    return None if batch is None else {"x": batch}

            variants = []
            if kind == "cnn":
                for fmt, name in ((q.QuantFormat.QOperator, "qoperator"),
                                  (q.QuantFormat.QDQ, "qdq")):
                    path = os.path.join(base, f"{name}.onnx")
                    q.quantize_static(float_path, path, Reader(), quant_format=fmt,
                                      activation_type=q.QuantType.QUInt8,
                                      weight_type=q.QuantType.QInt8)
                    variants.append((f"cnn-{name}", path))
            else:
                path = os.path.join(base, "dynamic.onnx")
                q.quantize_dynamic(float_path, path, weight_type=q.QuantType.QInt8)
                variants.append(("mlp-dynamic", path))
            for name, path in variants:
                ops = sorted({(n.domain or "ai.onnx") + ":" + n.op_type
                              for n in onnx_load(path).graph.node})
                data = os.path.join(base, name + "-data")
                os.makedirs(data, exist_ok=True)
                x = rng.standard_normal((shape[0] * 2,) + shape[1:]).astype(np.float32)
                session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
                y = session.run(None, {"x": x[:shape[0]]})[0]
                targets = rng.standard_normal((x.shape[0],) + y.shape[1:]).astype(np.float32)
                np.save(os.path.join(data, "x.npy"), x)
                np.save(os.path.join(data, "targets.npy"), targets)
                expected = float(np.mean((y.astype(np.float64) - targets[:shape[0]]) ** 2))
                kiln_model = os.path.join(base, name + ".kiln")
                imported = run("kiln", "import", path, "-o", kiln_model, "--loss=mse")
                params = re.search(r"(\d+) parameters?", imported)
                log = run("kiln", "train", kiln_model,
                          "--init-from=" + kiln_model[:-5] + ".safetensors",
                          "--data=npy:" + data, "--eval-data=none", "--no-shuffle",
                          "--max-steps=1")
                got = float(re.search(r"step 1 loss (\S+)", log).group(1))
                error = abs(got - expected) / max(abs(expected), 1e-12)
                worst = max(worst, error)
                print(f"seed {seed} {name}: kiln {got:.7g} onnxruntime {expected:.7g} "
                      f"relative {error:.1e}; {params.group(1) if params else '?'} parameters; "
                      f"ops {' '.join(ops)}")
                if name == "mlp-dynamic":
                    worst_training = max(worst_training,
                                         train_dynamic(torch, path, kiln_model, data, shape[0]))
    print(f"largest relative difference {worst:.1e}")
    print(f"training the dynamic MLP's weights: largest relative difference from PyTorch "
          f"{worst_training:.1e} over {STEPS} SGD steps")


STEPS = 8
LR = 0.05


def train_dynamic(torch, path, kiln_model, data, batch):
    """The quantize_dynamic MLP trained STEPS SGD steps by kiln (its
    weights and biases) and by PyTorch emulating the quantized model:
    DynamicQuantizeLinear as torch.fake_quantize_per_tensor_affine with the
    scale and zero point of the batch's range (detached), each weight
    fake-quantized by its own scale and zero point, PyTorch's
    straight-through gradients. Returns the largest relative difference of
    the losses."""
    import onnx
    from onnx import numpy_helper
    init = {t.name: numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}
    layers = []
    for prefix in ("fc1", "fc2"):
        w = init[f"{prefix}.weight_Transposed_quantized"].astype(np.float32)
        scale = float(init[f"{prefix}.weight_Transposed_scale"])
        zero = int(init[f"{prefix}.weight_Transposed_zero_point"])
        weight = torch.tensor((w - zero) * np.float32(scale), requires_grad=True)
        bias = torch.tensor(init[f"{prefix}.bias"], requires_grad=True)
        layers.append((weight, bias, scale, zero))

    def dynamic(x):
        with torch.no_grad():
            high = torch.clamp(x.max(), min=0)
            low = torch.clamp(x.min(), max=0)
            scale = torch.where(high == low, torch.ones(()), (high - low) / 255)
            zero = torch.round(torch.clamp(-low / scale, 0, 255))
        return torch.fake_quantize_per_tensor_affine(x, scale.reshape(1), zero.int().reshape(1),
                                                     0, 255)

    def forward(x):
        for i, (weight, bias, scale, zero) in enumerate(layers):
            w = torch.fake_quantize_per_tensor_affine(weight, scale, zero, -128, 127)
            x = dynamic(x) @ w + bias
            if i == 0:
                x = torch.relu(x)
        return x

    xs = np.load(os.path.join(data, "x.npy"))
    ts = np.load(os.path.join(data, "targets.npy"))
    params = [p for layer in layers for p in layer[:2]]
    optimizer = torch.optim.SGD(params, lr=LR)
    torch_losses = []
    for step in range(STEPS):
        i = (step * batch) % xs.shape[0]
        loss = torch.mean((forward(torch.tensor(xs[i:i + batch])) -
                           torch.tensor(ts[i:i + batch])) ** 2)
        torch_losses.append(loss.item())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model = kiln_model[:-5] + "-sgd.kiln"
    run("kiln", "import", path, "-o", model, "--loss=mse", "--optimizer=sgd", f"--lr={LR}")
    log = run("kiln", "train", model, "--init-from=" + model[:-5] + ".safetensors",
              "--data=npy:" + data, "--eval-data=none", "--no-shuffle",
              f"--max-steps={STEPS}")
    kiln_losses = [float(v) for v in re.findall(r"step \d+ loss (\S+)", log)]
    if len(kiln_losses) != STEPS:
        raise SystemExit(f"kiln printed {len(kiln_losses)} losses:\n{log}")
    error = max(abs(k - t) / max(abs(t), 1e-12) for k, t in zip(kiln_losses, torch_losses))
    print(f"  trained {STEPS} steps: kiln {kiln_losses[-1]:.7g} PyTorch {torch_losses[-1]:.7g}, "
          f"largest relative difference {error:.1e}")
    return error


def onnx_load(path):
    import onnx
    return onnx.load(path)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3)

"""--init-from against PyTorch: a model is built in PyTorch with its own
random initialization, its state dict is saved with safetensors (the dense
weights transposed to kiln's [in, out]) and kiln trains from it. PyTorch then
trains the same model from the same state on the same batches, and every
loss kiln printed must match PyTorch's.

  init_from_torch.py make MODEL DIR
      writes DIR/torch.safetensors (the state dict as PyTorch keeps it),
      DIR/kiln.safetensors (f32, kiln's layout), DIR/kiln-bf16.safetensors
      (the same in bf16), DIR/partial.safetensors (kiln.safetensors without
      the last layer, with a tensor 'extra.weight' and an I64 'counter'),
      DIR/extra.safetensors (kiln.safetensors and 'extra.weight'),
      DIR/int.safetensors (kiln.safetensors with an I64 'fc1.bias') and
      the data DIR/data/{x,labels}.npy
  init_from_torch.py check MODEL STATE DATA LOG TOLERANCE
      trains PyTorch from STATE (a safetensors file in kiln's layout, of any
      float dtype, or a kiln checkpoint) on the .npy files of DATA, in
      order, and compares each with the "step K loss" lines of LOG;
      --differs: the losses must differ from PyTorch's at some step
  init_from_torch.py COMMAND ARGS + COMMAND ARGS + ...
      several commands in one process (importing PyTorch is most of a
      check's time), each check's output lines prefixed with "[LOG from
      STATE]" (the names and their directories)
  init_from_torch.py checks FILE
      the checks of FILE, one check's arguments per line, as above

MODEL: mlp (16-8-3), mlp4 (20-16-12-5) or lenet5; batch 4, momentum SGD
(learning rate 0.05, momentum 0.9: Adam would turn the last-bit
differences of a gradient near zero into whole steps of the learning rate,
and the runs apart). The seed is random and printed."""

import os
import sys

import numpy as np
import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from kilntest import check_losses, parse_options, run_check, run_command_line  # noqa: E402

BATCH = 4
SAMPLES = 16
LR = 0.05
MOMENTUM = 0.9
SIZES = dict(mlp=[16, 8, 3], mlp4=[20, 16, 12, 5])


def build(model):
    if model.startswith("mlp"):
        sizes = SIZES[model]
        return torch.nn.ModuleDict({f"fc{i}": torch.nn.Linear(sizes[i - 1], sizes[i])
                                    for i in range(1, len(sizes))})
    return torch.nn.ModuleDict(dict(
        conv1=torch.nn.Conv2d(1, 6, 5, padding=2), conv2=torch.nn.Conv2d(6, 16, 5),
        fc1=torch.nn.Linear(400, 120), fc2=torch.nn.Linear(120, 84),
        fc3=torch.nn.Linear(84, 10)))


def forward(model, net, x):
    relu, pool = torch.nn.functional.relu, torch.nn.functional.max_pool2d
    if model.startswith("mlp"):
        layers = len(SIZES[model]) - 1
        for i in range(1, layers + 1):
            x = net[f"fc{i}"](x)
            x = relu(x) if i < layers else x
        return x
    h = pool(relu(net["conv1"](x)), 2)
    h = pool(relu(net["conv2"](h)), 2).flatten(1)
    return net["fc3"](relu(net["fc2"](relu(net["fc1"](h)))))


def input_shape(model):
    return (SIZES[model][0],) if model.startswith("mlp") else (1, 28, 28)


def classes(model):
    return SIZES[model][-1] if model.startswith("mlp") else 10


def is_dense_weight(name, tensor):
    return name.startswith("fc") and name.endswith(".weight") and tensor.dim() == 2


def make(model, out):
    seed = int.from_bytes(os.urandom(4), "little")
    print(f"seed {seed}")
    torch.manual_seed(seed)
    net = build(model)
    state = {k: v.detach().contiguous() for k, v in net.state_dict().items()}
    save_file(state, os.path.join(out, "torch.safetensors"))
    kiln = {k: (v.t().contiguous() if is_dense_weight(k, v) else v) for k, v in state.items()}
    save_file(kiln, os.path.join(out, "kiln.safetensors"))
    save_file({k: v.to(torch.bfloat16) for k, v in kiln.items()},
              os.path.join(out, "kiln-bf16.safetensors"))
    last = sorted(k for k in kiln if k.startswith("fc"))[-1].split(".")[0]
    extra = torch.ones(2, 3)
    partial = {k: v for k, v in kiln.items() if not k.startswith(last + ".")}
    partial.update({"extra.weight": extra, "counter": torch.tensor(7, dtype=torch.int64)})
    save_file(partial, os.path.join(out, "partial.safetensors"))
    save_file(dict(kiln, **{"extra.weight": extra}), os.path.join(out, "extra.safetensors"))
    save_file(dict(kiln, **{"fc1.bias": kiln["fc1.bias"].to(torch.int64)}),
              os.path.join(out, "int.safetensors"))
    rng = np.random.default_rng(seed)
    os.makedirs(os.path.join(out, "data"), exist_ok=True)
    np.save(os.path.join(out, "data", "x.npy"),
            rng.standard_normal((SAMPLES,) + input_shape(model)).astype(np.float32))
    np.save(os.path.join(out, "data", "labels.npy"),
            rng.integers(0, classes(model), SAMPLES).astype(np.int32))
    print(f"wrote {len(state)} tensors")


def check(model, state_file, data, log, tolerance):
    net = build(model)
    saved = load_file(state_file)
    state = {}
    for k in net.state_dict():
        v = saved[k].float()
        state[k] = v.t() if is_dense_weight(k, v) else v
    net.load_state_dict(state)
    x = torch.from_numpy(np.load(os.path.join(data, "x.npy")))
    y = torch.from_numpy(np.load(os.path.join(data, "labels.npy"))).long()
    optimizer = torch.optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM)

    def step(k):
        b = (k - 1) % (SAMPLES // BATCH)
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(
            forward(model, net, x[b * BATCH:(b + 1) * BATCH]), y[b * BATCH:(b + 1) * BATCH])
        loss.backward()
        optimizer.step()
        return loss.item()

    check_losses(log, step, tolerance)


def run_command(args):
    options = parse_options(args[6:], ("differs",))
    if args[0] == "make" and len(args) == 3:
        make(args[1], args[2])
    elif args[0] == "check" and len(args) >= 6 and options is not None:
        run_check(lambda: check(args[1], args[2], args[3], args[4], float(args[5])),
                  "differs" in options)
    else:
        sys.exit(f"{' '.join(args)}: expected make MODEL DIR or check MODEL STATE DATA LOG "
                 "TOLERANCE [--differs]")


def label(args):
    """check's output prefix: the log's name and the state it starts from."""
    if args[0] == "check" and len(args) > 4:
        state = os.path.join(*args[2].split(os.sep)[-2:])
        return f"{os.path.basename(args[4])} from {state}"
    return " ".join(args[:2])


if __name__ == "__main__":
    run_command_line(sys.argv[1:], run_command, label)

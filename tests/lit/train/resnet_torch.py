"""kiln models resnet against PyTorch: the same ResNet is built in PyTorch
(torchvision's BasicBlock layout and state-dict names) with random weights
and random running statistics, kiln trains from that state (--init-from),
and PyTorch trains from it on the same batches: every loss, every eval loss
(PyTorch's eval(): the running statistics) and the final state dict, running
statistics included, must match.

  resnet_torch.py make DIR BLOCKS WIDTH [SEED]
      writes DIR/kiln.safetensors (the state dict, the classifier's weight
      transposed to kiln's [in, out]; no num_batches_tracked) and the data
      DIR/data/{x,labels}.npy
  resnet_torch.py check DIR BLOCKS WIDTH LOG TOLERANCE [--checkpoint=F]
                  [--accum=K] [--ranks=N] [--sync-batch-norm]
      trains PyTorch from DIR/kiln.safetensors with momentum SGD (lr 0.05,
      momentum 0.9) and compares it with LOG (kilntest.check_torch_training);
      --differs: the losses must differ from PyTorch's at some step
  resnet_torch.py COMMAND ARGS + COMMAND ARGS + ...
      several commands in one process (importing PyTorch is most of a
      check's time), each output line prefixed with "[LOG]" (check's log)
  resnet_torch.py checks FILE
      the checks of FILE, one check's arguments per line, as above

Batch 4, 16 samples of 1x28x28, 10 classes. The seed (weights, running
statistics and data) is SEED, else random; it is printed."""

import os
import sys

import numpy as np
import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from kilntest import (check_torch_training, parse_options,  # noqa: E402
                      randomize_batch_norms, run_check, run_command_line)

BATCH = 4
SAMPLES = 16
LR = 0.05
MOMENTUM = 0.9
nn = torch.nn


class BasicBlock(nn.Module):
    def __init__(self, channels_in, channels, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(channels_in, channels, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.downsample = None
        if stride != 1 or channels_in != channels:
            self.downsample = nn.Sequential(
                nn.Conv2d(channels_in, channels, 1, stride, bias=False),
                nn.BatchNorm2d(channels))

    def forward(self, x):
        h = torch.relu(self.bn1(self.conv1(x)))
        h = self.bn2(self.conv2(h))
        return torch.relu(h + (self.downsample(x) if self.downsample else x))


class ResNet(nn.Module):
    def __init__(self, blocks, width):
        super().__init__()
        self.conv1 = nn.Conv2d(1, width, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        channels = width
        for stage in range(3):
            layer = []
            for block in range(blocks):
                stride = 2 if stage > 0 and block == 0 else 1
                layer.append(BasicBlock(channels, width << stage, stride))
                channels = width << stage
            setattr(self, f"layer{stage + 1}", nn.Sequential(*layer))
        self.fc = nn.Linear(channels, 10)
        randomize_batch_norms(self, mean_std=0.5)

    def forward(self, x):
        h = torch.relu(self.bn1(self.conv1(x)))
        h = self.layer3(self.layer2(self.layer1(h)))
        return self.fc(h.mean(dim=(2, 3)))


def kiln_layout(name, tensor):
    return tensor.t().contiguous() if name == "fc.weight" else tensor


def make(out, blocks, width, seed=None):
    if seed is None:
        seed = int.from_bytes(os.urandom(4), "little")
    print(f"seed {seed}")
    torch.manual_seed(seed)
    net = ResNet(blocks, width)
    save_file({k: kiln_layout(k, v.detach()).contiguous()
               for k, v in net.state_dict().items() if not k.endswith("num_batches_tracked")},
              os.path.join(out, "kiln.safetensors"))
    rng = np.random.default_rng(seed)
    os.makedirs(os.path.join(out, "data"), exist_ok=True)
    np.save(os.path.join(out, "data", "x.npy"),
            rng.standard_normal((SAMPLES, 1, 28, 28)).astype(np.float32))
    np.save(os.path.join(out, "data", "labels.npy"),
            rng.integers(0, 10, SAMPLES).astype(np.int32))


def check(out, blocks, width, log, tolerance, checkpoint=None, accum=1, ranks=1,
          sync_batch_norm=False):
    net = ResNet(blocks, width)
    state = {k: kiln_layout(k, v) for k, v in load_file(os.path.join(out, "kiln.safetensors")).items()}
    net.load_state_dict(state, strict=False)
    net.train()
    x = torch.from_numpy(np.load(os.path.join(out, "data", "x.npy")))
    y = torch.from_numpy(np.load(os.path.join(out, "data", "labels.npy"))).long()
    optimizer = torch.optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM)
    check_torch_training(log, net, torch.nn.functional.cross_entropy, x, y, BATCH,
                         optimizer, tolerance, checkpoint=checkpoint, accum=accum,
                         ranks=ranks, kiln_layout=kiln_layout,
                         sync_batch_norm=sync_batch_norm)


def run_command(args):
    if args[0] == "make" and len(args) in (4, 5):
        make(args[1], int(args[2]), int(args[3]), int(args[4]) if len(args) > 4 else None)
        return
    options = parse_options(args[6:], ("checkpoint", "accum", "ranks", "sync-batch-norm",
                                       "differs"))
    if args[0] != "check" or len(args) < 6 or options is None:
        sys.exit(f"{' '.join(args)}: expected make DIR BLOCKS WIDTH [SEED] or check DIR "
                 "BLOCKS WIDTH LOG TOLERANCE [OPTIONS]")

    def run():
        check(args[1], int(args[2]), int(args[3]), args[4], float(args[5]),
              options.get("checkpoint"), int(options.get("accum", 1)),
              int(options.get("ranks", 1)), "sync-batch-norm" in options)

    run_check(run, "differs" in options)


if __name__ == "__main__":
    run_command_line(sys.argv[1:], run_command,
                     lambda args: os.path.basename(args[4]) if len(args) > 4 else args[0])

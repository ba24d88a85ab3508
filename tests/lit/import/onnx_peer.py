"""kiln import against PyTorch: a model is built in PyTorch with its own
random initialization and exported with torch.onnx.export; kiln imports it,
trains it from the exported weights (--init-from), and PyTorch then trains
the same model from the same state on the same batches: every loss kiln
printed must match PyTorch's.

  onnx_peer.py export MODEL DIR [dynamo | dynamo-unoptimized]
      writes DIR/model.onnx (the TorchScript exporter, or the torch.export
      one with 'dynamo', whose weights go to DIR/model.onnx.data), the state
      dict DIR/torch.safetensors, and the data DIR/data/{x,labels}.npy
      (targets.npy for the mse model); prints the ONNX ops used
  onnx_peer.py check MODEL DIR LOG TOLERANCE [--checkpoint=F] [--accum=K]
      trains PyTorch from DIR/torch.safetensors with momentum SGD (lr 0.05,
      momentum 0.9) on the data in order and compares with the "step K
      loss" lines of LOG; with eval lines in LOG (the eval data is the
      training data), PyTorch's eval() loss after that step; with
      --checkpoint, every tensor of the final state dict (running
      statistics too) against the kiln checkpoint F; --accum=K: K
      micro-batches per step, gradients averaged (kiln's --grad-accum);
      --ranks=N: data parallel over N ranks (kiln launch), rank 0's running
      statistics kept as DDP keeps them; --differs: the losses must differ
      from PyTorch's at some step
  onnx_peer.py COMMAND ARGS + COMMAND ARGS + ...
      several commands in one process (importing PyTorch is most of a
      small export's or check's time); each output line starts with
      "[DIR]" (export) or "[MODEL DIR/LOG]" (check), and all run even when
      one fails
  onnx_peer.py checks FILE
      the checks of FILE, one check's arguments per line, as above
  onnx_peer.py handmade DIR
      writes the models made with onnx.helper (onnx_handmade.py): a few
      that import and the models kiln import must refuse (see
      import-errors.test)

MODEL: mlp (16-8-3, torch.nn.Sequential), lenet5, bn (convolutions with
BatchNorm2d in train mode), frozen (the same with the batch norms in eval
mode: running statistics), embed (int64 token ids
through an nn.Embedding, a mean and a classifier), misc (a small network
of other ops: GELU, average and max pooling with ceil_mode and
count_include_pad=False, LeakyReLU, a mean over the spatial
dimensions, layer norm, concatenation, a flatten through x.view(x.size(0),
-1), tanh, a matmul with a [in, out] weight, softmax, a scalar constant;
mean squared error on its output), image (an encoder-decoder's image ops;
mean squared error), select (selection and data movement), rnn (LSTM and
GRU) or transformer (causal attention and nn.TransformerEncoderLayer over
int64 tokens), qat (quantization-aware training: fake quantization of the
input, the weights and the hidden values) or ptq (the same network
post-training quantized: INT8 weight and INT32 bias initializers, as ONNX
Runtime writes them); see each class. MODEL-f64 (bn-f64, ...): the model in
float64 (net.double()), its float data float64. Batch 4, 16 samples. The seed is random and
printed; KILN_ONNX_SEED=N exports with seed N."""

import os
import sys

import numpy as np
import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from kilntest import (check_torch_training, parse_options,  # noqa: E402
                      randomize_batch_norms, run_check, run_command_line)
from onnx_handmade import handmade  # noqa: E402

F = torch.nn.functional
BATCH = 4
SAMPLES = 16
LR = 0.05
# The image network's steps: at 0.05 its spatial transformer's feedback
# (the grid from the features it samples) made some seeds' losses swing to
# hundreds within six steps, where rounding differences grow past the
# check's tolerance.
IMAGE_LR = 0.01
MOMENTUM = 0.9


def learning_rate(model):
    return IMAGE_LR if model == "image" else LR


class LeNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 6, 5, padding=2)
        self.conv2 = torch.nn.Conv2d(6, 16, 5)
        self.fc1 = torch.nn.Linear(400, 120)
        self.fc2 = torch.nn.Linear(120, 84)
        self.fc3 = torch.nn.Linear(84, 10)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.conv1(x)), 2)
        h = F.max_pool2d(F.relu(self.conv2(h)), 2).flatten(1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(h)))))


class Misc(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(4, 6, 3, stride=2, padding=1)
        self.norm = torch.nn.LayerNorm(12)
        self.proj = torch.nn.Parameter(torch.randn(12, 5) * 0.3)
        self.head = torch.nn.Linear(5 + 24, 4)

    def forward(self, x):
        g = F.gelu(self.conv1(x))                               # [B, 4, 8, 8]
        # Pools to [B, 4, 4, 4] whose windows overhang the end (ceil_mode)
        # or read padding, so that PyTorch's divisors differ at the edges:
        # the window cut at the declared pads (the 5-wide one is where
        # onnx.reference's ceil_mode average differs from PyTorch), or the
        # elements of g only (count_include_pad=False).
        h = (F.avg_pool2d(g, 3, 2, ceil_mode=True)
             + F.avg_pool2d(g, 5, 3, padding=2, ceil_mode=True)
             + F.avg_pool2d(g, 3, 2, padding=1, count_include_pad=False)
             + F.max_pool2d(g, 3, 2, ceil_mode=True))           # [B, 4, 4, 4]
        h = F.leaky_relu(self.conv2(h), 0.1)                    # [B, 6, 2, 2]
        pooled = h.mean(dim=(2, 3))                             # [B, 6]
        flat = h.view(h.size(0), -1)                            # [B, 24]
        both = torch.cat([pooled, -pooled], dim=1)              # [B, 12]
        z = torch.tanh(self.norm(both) @ self.proj)             # [B, 5]
        z = torch.softmax(z, dim=1) * 2.0
        return self.head(torch.cat([z, flat], dim=1))           # [B, 4]


# Where x / scale comes within this many quantization steps of a tie
# (an integer plus a half), kiln's rounding of x may round the other way
# than PyTorch's and the losses part by a whole step. The quantization-aware
# network's export draws seeds until none comes nearer in the check's steps.
TIE_MARGIN = 1e-4
# Recording each fake quantization's distance to a tie (None: off).
TIES = None


def fake_quantize(v, scale, zero, low, high):
    """torch.fake_quantize_per_tensor_affine, or per channel along axis 0
    for a tensor |scale|, recording how near v / scale comes to a tie."""
    per_channel = torch.is_tensor(scale)
    if TIES is not None:
        s = scale.view(-1, *([1] * (v.dim() - 1))) if per_channel else scale
        f = v.detach() / s
        TIES.append(((f - f.floor()) - 0.5).abs().min().item())
    if per_channel:
        return torch.fake_quantize_per_channel_affine(v, scale, zero, 0, low, high)
    return torch.fake_quantize_per_tensor_affine(v, scale, zero, low, high)


class QatNet(torch.nn.Module):
    """Quantization-aware training as torch.ao's FakeQuantize modules do it
    (QuantizeLinear and DequantizeLinear pairs in ONNX): the input and the
    hidden activations fake-quantized per tensor to UINT8, the first weight
    per output channel to INT8, the second per tensor; PyTorch's
    straight-through gradient, zero where the clamp binds. The scales are
    powers of two, so that ONNX's x / scale and PyTorch's x * (1 / scale)
    are one number."""

    # Channels 2 and 5 clamp weights above 0.124 and 0.248, the hidden
    # values clamp above 1.99 and the second weight above 0.248: the clamp
    # binds in every step.
    X_SCALE = 1 / 32
    W1_SCALES = [2.0 ** -k for k in (6, 5, 10, 7, 5, 9, 6, 7)]
    H_SCALE = 1 / 128
    W2_SCALE = 1 / 512

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 8)
        self.fc2 = torch.nn.Linear(8, 3)

    def forward(self, x):
        x = fake_quantize(x, self.X_SCALE, 128, 0, 255)
        w1 = fake_quantize(self.fc1.weight, torch.tensor(self.W1_SCALES),
                           torch.zeros(8, dtype=torch.int32), -128, 127)
        h = fake_quantize(F.relu(F.linear(x, w1, self.fc1.bias)), self.H_SCALE, 0, 0, 255)
        w2 = fake_quantize(self.fc2.weight, self.W2_SCALE, 0, -128, 127)
        return F.linear(h, w2, self.fc2.bias)

    def snap(self):
        """Puts the weights and biases where post-training quantization
        leaves them: each weight on its grid (clamped), each bias on the
        grid of its input's scale times its weight's, as ONNX Runtime
        quantizes biases to INT32."""
        with torch.no_grad():
            self.fc1.weight.copy_(fake_quantize(
                self.fc1.weight, torch.tensor(self.W1_SCALES),
                torch.zeros(8, dtype=torch.int32), -128, 127))
            self.fc2.weight.copy_(fake_quantize(self.fc2.weight, self.W2_SCALE, 0, -128, 127))
            for bias, scale in ((self.fc1.bias, torch.tensor(self.W1_SCALES) * self.X_SCALE),
                                (self.fc2.bias, self.H_SCALE * self.W2_SCALE)):
                bias.copy_((bias / scale).round() * scale)


def post_training_quantized(path):
    """Rewrites the quantization-aware network's export (|path|) as ONNX
    Runtime's quantizer writes a post-training quantized model (the QDQ
    format): each QuantizeLinear of a weight initializer becomes an INT8
    initializer NAME_quantized that its DequantizeLinear reads, and each
    Gemm bias an INT32 initializer NAME_quantized (scale: the Gemm input's
    scale times the weight's, zero point 0) read through a new
    DequantizeLinear. The float weights and biases are gone."""
    import onnx
    from onnx import helper, numpy_helper
    m = onnx.load(path)
    g = m.graph
    inits = {t.name: t for t in g.initializer}
    consts = {n.output[0]: numpy_helper.to_array(n.attribute[0].t)
              for n in g.node if n.op_type == "Constant"}

    def array(name):
        return numpy_helper.to_array(inits[name]) if name in inits else consts[name]

    def axis_of(node):
        return next((a.i for a in node.attribute if a.name == "axis"), 1)

    dequantized = {}  # a DequantizeLinear's output: its scale
    for node in g.node:
        if node.op_type == "DequantizeLinear":
            dequantized[node.output[0]] = array(node.input[1])
    nodes = []
    for node in g.node:
        if node.op_type == "QuantizeLinear" and node.input[0] in inits:
            w = numpy_helper.to_array(inits[node.input[0]])
            scale, zero = array(node.input[1]), array(node.input[2])
            shape = [1] * w.ndim
            if scale.ndim:
                shape[axis_of(node)] = -1
            q = np.clip(np.rint(w / scale.reshape(shape)) + zero.reshape(shape), -128, 127)
            name = node.input[0] + "_quantized"
            g.initializer.append(numpy_helper.from_array(q.astype(np.int8), name))
            g.initializer.remove(inits.pop(node.input[0]))
            for reader in g.node:
                for i, input_name in enumerate(reader.input):
                    if input_name == node.output[0]:
                        reader.input[i] = name
            continue
        if node.op_type == "Gemm" and len(node.input) > 2 and node.input[2] in inits:
            bias = node.input[2]
            scale = dequantized[node.input[0]] * dequantized[node.input[1]]
            b = numpy_helper.to_array(inits[bias])
            q = np.rint(b / scale).astype(np.int32)
            g.initializer.remove(inits.pop(bias))
            g.initializer.extend([
                numpy_helper.from_array(q, bias + "_quantized"),
                numpy_helper.from_array(np.asarray(scale, np.float32), bias + "_scale"),
                numpy_helper.from_array(np.zeros(scale.shape, np.int32), bias + "_zero_point")])
            nodes.append(helper.make_node(
                "DequantizeLinear", [bias + "_quantized", bias + "_scale", bias + "_zero_point"],
                [bias + "_dequantized"], name=bias + "_DequantizeLinear", axis=0))
            node.input[2] = bias + "_dequantized"
        nodes.append(node)
    del g.node[:]
    g.node.extend(nodes)
    onnx.checker.check_model(m)
    onnx.save(m, path)


class Embed(torch.nn.Module):
    """Token ids through an embedding table (Gather), averaged over the
    sequence, and a classifier."""

    def __init__(self):
        super().__init__()
        self.wte = torch.nn.Embedding(20, 8)
        self.fc = torch.nn.Linear(8, 3)

    def forward(self, tokens):
        return self.fc(self.wte(tokens).mean(dim=1))


class BatchNormNet(torch.nn.Module):
    """Two convolutions, each with BatchNorm2d and ReLU, and a classifier.
    Running statistics start away from 0 and 1, so a frozen batch norm that
    ignored them would train differently."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.bn1 = torch.nn.BatchNorm2d(4)
        self.conv2 = torch.nn.Conv2d(4, 6, 3, stride=2, padding=1)
        self.bn2 = torch.nn.BatchNorm2d(6, eps=1e-3)
        self.fc = torch.nn.Linear(6 * 4 * 4, 3)
        randomize_batch_norms(self)

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = F.relu(self.bn2(self.conv2(h)))
        return self.fc(h.flatten(1))


class ImageNet(torch.nn.Module):
    """The image ops of an encoder-decoder: GroupNorm (which both exporters
    write as an InstanceNormalization between reshapes), InstanceNorm2d
    with an affine, reflection and constant padding, ReLU6 (Clip), a
    strided and a transposed convolution (ConvTranspose with
    output_padding and groups), upsampling by nearest, bilinear (both
    corner conventions) and bicubic interpolation (Resize), and a spatial
    transformer's grid_sample (GridSample: bilinear with zeros padding,
    nearest with border padding, bilinear with reflection padding on a
    grid that reaches a mirror away, bicubic with border padding) on a
    grid computed from the features."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3)
        self.gn = torch.nn.GroupNorm(2, 8)
        self.down = torch.nn.Conv2d(8, 8, 3, stride=2, padding=1)
        self.inorm = torch.nn.InstanceNorm2d(8, affine=True)
        self.up = torch.nn.ConvTranspose2d(8, 6, 3, stride=2, padding=1, output_padding=1,
                                           groups=2)
        self.head = torch.nn.Conv2d(6, 2, 1)
        # A spatial transformer's localization: a sampling grid from the
        # features, past the image's edges in places.
        self.loc = torch.nn.Linear(6, 8 * 8 * 2)
        self.grid = torch.nn.Parameter(torch.rand(1, 8, 8, 2) * 2.4 - 1.2)

    def forward(self, x):
        # The input resampled (bicubic, border padding) on a learned grid
        # moved by the input's first two channels.
        grid = self.grid + x[:, :2].permute(0, 2, 3, 1) * 0.05       # [B, 8, 8, 2]
        x = x + F.grid_sample(x, grid, mode="bicubic", padding_mode="border",
                              align_corners=True) * 0.5
        h = self.conv1(F.pad(x, (1, 1, 1, 1), mode="reflect"))     # [B, 8, 8, 8]
        h = F.silu(self.gn(h))
        h = F.relu6(self.inorm(self.down(h)) * 3.0)                  # [B, 8, 4, 4]
        near = F.interpolate(h, scale_factor=2, mode="nearest")      # [B, 8, 8, 8]
        h = self.up(h) + near[:, :6]                                 # [B, 6, 8, 8]
        h = F.interpolate(h, size=(6, 5), mode="bilinear", align_corners=False)
        h = F.interpolate(h, scale_factor=(1.5, 2.0), mode="bilinear", align_corners=True)
        h = F.interpolate(F.pad(h, (0, 1, 1, 0)), size=(8, 8), mode="bicubic",
                          align_corners=False)
        warp = torch.tanh(self.loc(h.mean(dim=(2, 3)))).view(-1, 8, 8, 2) * 1.2
        h = (h + F.grid_sample(h, warp, align_corners=False)         # GridSample
             + F.grid_sample(h, warp * 0.9, mode="nearest", padding_mode="border",
                             align_corners=True) * 0.5
             + F.grid_sample(h, warp * 2.0, padding_mode="reflection",
                             align_corners=False) * 0.25)
        return self.head(h)                                          # [B, 2, 8, 8]


class SelectNet(torch.nn.Module):
    """Selection and data movement with the activations that come with them:
    chunk (Split), slices with steps, flip (a negative step), expand, where
    and comparisons, einsum (a batched contraction, an outer product and a
    sum), clamp, topk, scatter, scatter_add and scatter_reduce (amax,
    amin) at argmax indices, an indexed
    assignment (index_put), and PReLU, ELU, Mish, Hardswish, Hardsigmoid, Softplus,
    Softsign; a scalar (rank-0) parameter scales the logits."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(12, 16)
        self.act = torch.nn.PReLU(4)
        self.mix = torch.nn.Parameter(torch.randn(4, 4, 3) * 0.3)
        self.fc2 = torch.nn.Linear(4 * 3 + 4 + 4, 3)
        self.temperature = torch.nn.Parameter(torch.tensor(1.3))    # a scalar parameter

    def forward(self, x):
        h = self.fc1(x).view(x.size(0), 4, 4)                        # [B, 4, 4]
        h = self.act(h)
        a, b = h.chunk(2, dim=2)                                     # [B, 4, 2] each
        g = F.elu(a) * F.hardsigmoid(b) + F.mish(b) - F.softsign(a)
        g = torch.cat([g, F.hardswish(torch.flip(h[:, :, 1::2], dims=[2]))], 2)  # [B, 4, 4]
        mixed = torch.einsum("bij,jkc->bikc", g, self.mix)          # [B, 4, 4, 3]
        mixed = torch.einsum("bikc->bic", mixed)                    # [B, 4, 3]
        outer = torch.einsum("bi,bj->bij", g[:, 0], g[:, 1]).sum(2)  # [B, 4]
        mask = g[:, :, :1].expand(-1, -1, 4) > 0.1                   # [B, 4, 4]
        gated = torch.where(mask, g, F.softplus(g) * -0.5).mean(2)   # [B, 4]
        gated = gated + torch.topk(g, 2, dim=2).values.sum(2) * 0.5  # TopK
        top = g.argmax(dim=2, keepdim=True)                          # [B, 4, 1]
        hot = torch.zeros_like(g).scatter(2, top, g[:, :, :1])       # ScatterElements
        hot = hot.scatter_add(2, top, g[:, :, 1:2])                  # reduction add
        hot[:, 1] = g[:, 2] * 2                                      # index_put
        peak = g.scatter_reduce(2, top, g[:, :, 2:3] * 2, reduce="amax")  # reduction max
        low = g.scatter_reduce(2, top, g[:, :, 3:4] * 2, reduce="amin")   # reduction min
        gated = gated + hot.mean(2) * 0.5 + (peak + low).mean(2) * 0.25
        h = torch.cat([mixed.flatten(1), torch.clamp(outer, -2.0, 2.0), gated], 1)
        return self.fc2(h) * self.temperature


class RecurrentNet(torch.nn.Module):
    """A sequence classifier: a two-layer bidirectional LSTM (batch first),
    a GRU over its outputs, and a linear layer on the GRU's last output
    plus its final hidden state. Both exporters write the LSTM and GRU
    ops (ONNX's gate order, PyTorch's linear_before_reset GRU)."""

    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(5, 6, num_layers=2, batch_first=True, bidirectional=True)
        self.gru = torch.nn.GRU(12, 4, batch_first=True)
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        h, _ = self.lstm(x)
        g, last = self.gru(h)
        return self.fc(g[:, -1] + last[0])


class LoopNet(torch.nn.Module):
    """A recurrence written as a Python loop over the sequence with a branch
    on the step's parity, scripted (torch.jit.script) so that the
    TorchScript exporter writes an ONNX Loop over x.size(1) steps whose
    body holds an If; each state appended to a list (a sequence the Loop
    carries, SequenceInsert) and stacked (ConcatFromSequence); a linear
    layer on the last state plus the states' mean."""

    def __init__(self):
        super().__init__()
        self.inp = torch.nn.Linear(5, 8)
        self.rec = torch.nn.Linear(8, 8, bias=False)
        self.out = torch.nn.Linear(8, 3)

    def forward(self, x):
        h = torch.zeros(x.size(0), 8)
        states = []
        for t in range(x.size(1)):
            h = torch.tanh(self.inp(x[:, t]) + self.rec(h))
            if t % 2 == 1:
                h = h * 0.9
            states.append(h)
        return self.out(h + torch.stack(states, 1).mean(1))


class CondNet(torch.nn.Module):
    """A branch on the data: torch.cond on the sign of the batch's sum of
    hidden activations (the torch.export exporter writes an If whose
    condition kiln cannot know at import), a linear layer and tanh on one
    side, sin on the other, then a linear layer."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 6)
        self.fc2 = torch.nn.Linear(6, 6)
        self.out = torch.nn.Linear(6, 3)

    def forward(self, x):
        h = torch.tanh(self.fc1(x))
        h = torch.cond(h.sum() > 0, lambda t: torch.tanh(self.fc2(t)),
                       lambda t: torch.sin(t) * 2.0, (h,))
        return self.out(h)


class DownsampleNet(torch.nn.Module):
    """Antialiased downsampling, F.interpolate(antialias=True), which only
    the torch.export exporter writes (Resize with antialias and
    exclude_outside): bilinear from 12 x 12 to 5 x 7 between two
    convolutions, then bicubic to 2 x 3 (its cubic_coeff_a is -0.5), then
    a linear layer. (Sizes, not scale factors: the exporter writes a
    scale factor as the sizes it gives, where PyTorch maps coordinates
    by the factor itself.)"""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.fc = torch.nn.Linear(4 * 2 * 3, 3)

    def forward(self, x):
        h = torch.tanh(self.conv1(x))
        h = F.interpolate(h, size=(5, 7), mode="bilinear", antialias=True)
        h = torch.tanh(self.conv2(h))
        h = F.interpolate(h, size=(2, 3), mode="bicubic", antialias=True)
        return self.fc(h.flatten(1))


class SequenceNet(torch.nn.Module):
    """1-D windows over [N, 4, 24]: a strided Conv1d, MaxPool1d, a dilated
    grouped Conv1d, AvgPool1d with ceil_mode, and a linear head."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv1d(4, 6, 3, stride=2, padding=1)
        self.conv2 = torch.nn.Conv1d(6, 6, 3, dilation=2, groups=2, padding=1)
        self.fc = torch.nn.Linear(6 * 2, 3)

    def forward(self, x):
        h = F.max_pool1d(torch.tanh(self.conv1(x)), 2)
        h = F.avg_pool1d(torch.tanh(self.conv2(h)), 2, ceil_mode=True)
        return self.fc(h.flatten(1))


class VolumeNet(torch.nn.Module):
    """3-D windows over [N, 2, 6, 6, 6]: Conv3d, MaxPool3d, a strided
    ConvTranspose3d, AvgPool3d (padded, count_include_pad False), and a
    linear head."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv3d(2, 4, 3, padding=1)
        self.up = torch.nn.ConvTranspose3d(4, 3, 2, stride=2)
        self.fc = torch.nn.Linear(3 * 27, 3)

    def forward(self, x):
        h = F.max_pool3d(torch.tanh(self.conv(x)), 2)
        h = torch.tanh(self.up(h))
        h = F.avg_pool3d(h, 3, stride=2, padding=1, count_include_pad=False)
        return self.fc(h.flatten(1))


class Transformer(torch.nn.Module):
    """A small GPT-style classifier over 6 tokens: token and learned position
    embeddings, a pre-norm block with causal scaled_dot_product_attention
    (qkv split, heads through view and transpose) and a tanh-GELU MLP, then
    nn.TransformerEncoderLayer (post-norm, ReLU), a mean over the sequence
    and a linear head. The TorchScript exporter writes the causal mask with
    Trilu and Where and the encoder layer's shapes with Mod; the torch.export
    one folds the mask (the float's lowest value above the diagonal), the
    1/sqrt(head_dim) and the weights' transposes into initializers."""

    def __init__(self, d=16, heads=2, tokens=6):
        super().__init__()
        self.emb = torch.nn.Embedding(20, d)
        self.pos = torch.nn.Parameter(torch.randn(tokens, d) * 0.1)
        self.ln1 = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.ln2 = torch.nn.LayerNorm(d)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 4 * d),
                                       torch.nn.GELU(approximate="tanh"),
                                       torch.nn.Linear(4 * d, d))
        self.enc = torch.nn.TransformerEncoderLayer(d, heads, dim_feedforward=32, dropout=0.0,
                                                    batch_first=True)
        self.head = torch.nn.Linear(d, 3)
        self.heads = heads

    def forward(self, tokens):
        x = self.emb(tokens) + self.pos
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        x = x + self.mlp(self.ln2(x))
        return self.head(self.enc(x).mean(1))


class WithLoss(torch.nn.Module):
    """A network and its cross-entropy in one graph (the TorchScript
    exporter writes a SoftmaxCrossEntropyLoss node): its output is the
    loss, and the labels are its second input."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x, labels):
        return F.cross_entropy(self.net(x), labels)


def set_mode(model, net):
    """bn: PyTorch's train mode (batch statistics); frozen: train mode with
    the batch norms in eval mode (running statistics, a frozen batch norm);
    the others: eval mode (no dropout or batch norm in them anyway)."""
    if model in ("bn", "frozen"):
        net.train()
        if model == "frozen":
            net.bn1.eval()
            net.bn2.eval()
    else:
        net.eval()
    return net


def build(model):
    if model in ("bn", "frozen"):
        return BatchNormNet()
    if model == "embed":
        return Embed()
    if model == "image":
        return ImageNet()
    if model == "select":
        return SelectNet()
    if model == "rnn":
        return RecurrentNet()
    if model == "loop":
        return LoopNet()
    if model == "downsample":
        return DownsampleNet()
    if model == "cond":
        return CondNet()
    if model == "transformer":
        return Transformer()
    if model in ("qat", "ptq"):
        return QatNet()
    if model == "sequence":
        return SequenceNet()
    if model == "volume":
        return VolumeNet()
    if model in ("mlp", "lossnet"):
        return torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU(),
                                   torch.nn.Linear(8, 3))
    return LeNet() if model == "lenet5" else Misc()


def input_shape(model):
    return {"mlp": (16,), "lossnet": (16,), "qat": (16,), "ptq": (16,), "lenet5": (1, 28, 28), "misc": (3, 8, 8), "bn": (3, 8, 8),
            "frozen": (3, 8, 8), "image": (3, 8, 8), "select": (12,), "rnn": (7, 5), "loop": (7, 5),
            "downsample": (3, 12, 12), "cond": (6,), "sequence": (4, 24),
            "volume": (2, 6, 6, 6)}[model]


MSE_MODELS = ("misc", "image")
TARGET_SHAPES = {"misc": (4,), "image": (2, 8, 8)}


def loss_fn(model, out, y):
    if model in MSE_MODELS:
        return F.mse_loss(out, y)
    return F.cross_entropy(out, y)


# GridSample is not smooth where a sampling point lies on a pixel edge: its
# bilinear gradient with respect to the grid is one-sided at an integer
# coordinate (after reflection, and at reflection's mirrors), and nearest
# mode jumps at half an integer. (Bicubic's weights are smooth across
# pixels: Keys' kernel has a continuous slope.) There, kiln's
# rounding of the same point (its tanh against PyTorch's, a step later
# its slightly different weights) can take the other side, and the losses
# part by far more than the check's tolerance (bench/RESULTS.md, the
# forty-sixth session). The image network's export trains PyTorch for
# KINK_STEPS steps as the checks do and draws the next seed while a point
# comes within KINK_MARGIN (pixels; about 10 ulps at 8) of an edge.
KINK_MARGIN = 1e-5
KINK_STEPS = 8


def edge_distance(image, grid, mode="bilinear", padding_mode="zeros", align_corners=False):
    """How near F.grid_sample(image, grid, ...) takes a point to where its
    result or gradient is not smooth, in pixels (reflection's mirrors in
    spans); infinity for bicubic."""
    if mode == "bicubic":
        return float("inf")
    closest = float("inf")
    for k, size in ((0, image.shape[3]), (1, image.shape[2])):
        v = grid.detach()[..., k]
        v = (v + 1) / 2 * (size - 1) if align_corners else ((v + 1) * size - 1) / 2
        edges = [v]
        if padding_mode == "reflection":
            low, span = (0.0, size - 1) if align_corners else (-0.5, size)
            distance = (v - low).abs()
            flips = torch.floor(distance / span)
            extra = distance - flips * span
            edges = [torch.where(flips % 2 == 1, span - extra, extra) + low, distance / span]
        for points in edges:
            if mode == "nearest":
                points = points - 0.5
            closest = min(closest, (points - points.round()).abs().min().item())
    return closest


def check_steps(model, net, x, y):
    """Steps 1 to KINK_STEPS of the check's training of |net| (momentum SGD
    on the batches in order): yields each step's number and rows, then
    takes the step."""
    optimizer = torch.optim.SGD(net.parameters(), lr=learning_rate(model), momentum=MOMENTUM)
    for step in range(1, KINK_STEPS + 1):
        b = (step - 1) % (SAMPLES // BATCH)
        rows = slice(b * BATCH, (b + 1) * BATCH)
        yield step, rows
        optimizer.zero_grad()
        loss_fn(model, net(x[rows]), y[rows]).backward()
        optimizer.step()


def nearest_kink(net, x, y):
    """The image network: the distance of the sampling points closest to a
    pixel edge (edge_distance) over KINK_STEPS steps of the check's
    training, and the step."""
    closest = [float("inf"), 0]
    sample = F.grid_sample

    def recorded(image, grid, *args, **kwargs):
        d = edge_distance(image, grid, *args, **kwargs)
        if d < closest[0]:
            closest[:] = [d, step]
        return sample(image, grid, *args, **kwargs)

    F.grid_sample = recorded
    try:
        for step, _ in check_steps("image", net, x, y):
            pass
    finally:
        F.grid_sample = sample
    return closest


# The condition network branches on the sign of a sum: where the sum comes
# near 0, kiln's rounding may take the other branch than PyTorch's. Its
# export draws seeds until both branches are taken in the check's steps and
# no sum comes within COND_MARGIN of 0.
COND_MARGIN = 1e-3


def cond_sums(net, x, y):
    """The condition network: the sums it branches on over KINK_STEPS steps
    of the check's training."""
    sums = []
    for _, rows in check_steps("cond", net, x, y):
        with torch.no_grad():
            sums.append(float(torch.tanh(net.fc1(x[rows])).sum()))
    return sums


def nearest_tie(net, x, y):
    """The quantization-aware network: how near x / scale comes to a tie
    (in quantization steps) over KINK_STEPS steps of the check's training."""
    global TIES
    TIES = []
    try:
        for _ in check_steps("qat", net, x, y):
            pass
        return min(TIES)
    finally:
        TIES = None


def image_trouble(net, x, y):
    distance, step = nearest_kink(net, x, y)
    if distance < KINK_MARGIN:
        return f"a sampling point comes within {distance:.1e} of a pixel edge at step {step}"
    return None


def tie_trouble(net, x, y):
    distance = nearest_tie(net, x, y.long())
    if distance < TIE_MARGIN:
        return f"a quantized value comes within {distance:.1e} steps of a rounding tie"
    return None


def cond_trouble(net, x, y):
    sums = cond_sums(net, x, y.long())
    if min(abs(v) for v in sums) >= COND_MARGIN and min(sums) < 0 < max(sums):
        return None
    return (f"the branch sums {', '.join(f'{v:.2g}' for v in sums)} take one branch or "
            "come near 0")


# MODEL-f64: the model in float64 (net.double()), its float data float64.
F64_SUFFIX = "-f64"


def split_f64(model):
    """(the model's name, whether it is the float64 one)."""
    if model.endswith(F64_SUFFIX):
        return model[:-len(F64_SUFFIX)], True
    return model, False


def draw(model, seed, f64=False):
    """The network's initial weights and the data, from |seed|."""
    torch.manual_seed(seed)
    net = set_mode(model, build(model))
    if f64:
        net.double()
    if model == "ptq":
        net.snap()
    state = {k: v.detach().clone().contiguous() for k, v in net.state_dict().items()}
    rng = np.random.default_rng(seed)
    if model in ("embed", "transformer"):
        x = rng.integers(0, 20, (SAMPLES, 6)).astype(np.int64)
    else:
        x = rng.standard_normal((SAMPLES,) + input_shape(model))
        x = x if f64 else x.astype(np.float32)
    if model in MSE_MODELS:
        y = rng.standard_normal((SAMPLES,) + TARGET_SHAPES[model])
        y = y if f64 else y.astype(np.float32)
    else:
        classes = 10 if model == "lenet5" else 3
        # (A graph with its own loss reads the labels as PyTorch's int64.)
        y = rng.integers(0, classes, SAMPLES).astype(np.int64 if model == "lossnet"
                                                     else np.int32)
    return net, state, x, y


def export(model, out, dynamo):
    model, f64 = split_f64(model)
    seed = int(os.environ.get("KILN_ONNX_SEED") or int.from_bytes(os.urandom(4), "little"))
    print(f"seed {seed} (KILN_ONNX_SEED={seed} reruns it)")
    net, state, x, y = draw(model, seed, f64)
    # The models whose checks must keep away from a kink: the next seed
    # while |trouble| names one.
    trouble = {"image": image_trouble, "qat": tie_trouble, "ptq": tie_trouble,
               "cond": cond_trouble}.get(model)
    while trouble:
        reason = trouble(net, torch.from_numpy(x), torch.from_numpy(y))
        if not reason:
            break
        seed = (seed + 1) % 2**32
        print(f"{reason}; drawing seed {seed}")
        net, state, x, y = draw(model, seed, f64)
    net.load_state_dict(state)
    save_file(state, os.path.join(out, "torch.safetensors"))
    os.makedirs(os.path.join(out, "data"), exist_ok=True)
    np.save(os.path.join(out, "data", "x.npy"), x)
    np.save(os.path.join(out, "data", "targets.npy" if model in MSE_MODELS else "labels.npy"), y)
    import warnings
    warnings.simplefilter("ignore")
    path = os.path.join(out, "model.onnx")
    sample = torch.from_numpy(x[:BATCH])
    if dynamo:
        # dynamo-unoptimized: without the exporter's optimizer, which folds
        # constants and drops an Add of a bias that is still zeros.
        torch.onnx.export(net, (sample,), path, dynamo=True, input_names=["x"],
                          optimize=dynamo != "dynamo-unoptimized",
                          output_names=["out"], external_data=True, verbose=False)
    else:
        # PRESERVE keeps each module's mode: a batch norm in train mode is
        # exported with training_mode 1 (EVAL would fold it into the
        # convolution before it).
        # The loop network is scripted, so that its loop stays a Loop (a
        # trace would unroll it).
        if model == "lossnet":
            # Its state dict's keys gain the wrapper's "net." prefix in the
            # graph; torch.safetensors keeps the network's own.
            torch.onnx.export(WithLoss(net), (sample, torch.from_numpy(y[:BATCH])), path,
                              dynamo=False, input_names=["x", "labels"],
                              output_names=["loss"])
        else:
            torch.onnx.export(torch.jit.script(net) if model == "loop" else net, (sample,),
                              path, dynamo=False, input_names=["x"], output_names=["out"],
                              training=torch.onnx.TrainingMode.PRESERVE)
    if model == "ptq":
        post_training_quantized(path)
    import onnx
    ops = sorted({n.op_type for n in onnx.load(path).graph.node})
    print("ops: " + " ".join(ops))


def check(model, out, log, tolerance, checkpoint=None, accum=1, ranks=1):
    model, f64 = split_f64(model)
    net = set_mode(model, build(model))
    if f64:
        net.double()
    state = load_file(os.path.join(out, "torch.safetensors"))
    # Exporting ran the model: in train mode that moved the batch norms'
    # running statistics, and the ONNX file holds the moved ones, which
    # kiln starts from (model.safetensors). PyTorch starts from them too.
    imported = os.path.join(out, "model.safetensors")
    if os.path.exists(imported):
        for name, value in load_file(imported).items():
            if "running_" in name:
                state[name] = value
    net.load_state_dict(state)
    x = torch.from_numpy(np.load(os.path.join(out, "data", "x.npy")))
    if model in MSE_MODELS:
        y = torch.from_numpy(np.load(os.path.join(out, "data", "targets.npy")))
    else:
        y = torch.from_numpy(np.load(os.path.join(out, "data", "labels.npy"))).long()
    optimizer = torch.optim.SGD(net.parameters(), lr=learning_rate(model), momentum=MOMENTUM)
    check_torch_training(log, net, lambda out, target: loss_fn(model, out, target), x, y,
                         BATCH, optimizer, tolerance, train=lambda: set_mode(model, net),
                         checkpoint=checkpoint, accum=accum, ranks=ranks)


def check_args(args):
    """check's arguments: MODEL DIR LOG TOLERANCE [--checkpoint=F]
    [--accum=K] [--ranks=N] [--differs]. --differs: the losses must differ
    from PyTorch's (a mismatch at some step; any other failure still
    fails)."""
    options = parse_options(args[4:], ("checkpoint", "accum", "ranks", "differs"))
    if len(args) < 4 or options is None:
        sys.exit(f"check {' '.join(args)}: expected MODEL DIR LOG TOLERANCE "
                 "[--checkpoint=F] [--accum=K] [--ranks=N] [--differs]")
    run = lambda: check(args[0], args[1], args[2], float(args[3]),  # noqa: E731
                        options.get("checkpoint"), int(options.get("accum", 1)),
                        int(options.get("ranks", 1)))
    run_check(run, "differs" in options)


def run_command(args):
    command, rest = args[0], args[1:]
    if command == "export" and len(rest) in (2, 3):
        export(rest[0], rest[1], rest[2] if len(rest) > 2 else "")
    elif command == "check":
        check_args(rest)
    elif command == "handmade" and len(rest) == 1:
        handmade(rest[0])
    else:
        sys.exit(f"{' '.join(args)}: expected export MODEL DIR [MODE], check MODEL DIR LOG "
                 "TOLERANCE [OPTIONS] or handmade DIR")


def label(args):
    """A part's output prefix: export's DIR, check's MODEL DIR/LOG."""
    if args[0] == "check" and len(args) > 3:
        log = args[3]
        return f"{args[1]} {os.path.basename(os.path.dirname(log))}/{os.path.basename(log)}"
    if args[0] == "export" and len(args) > 2:
        return os.path.basename(args[2].rstrip("/"))
    return args[0]


if __name__ == "__main__":
    run_command_line(sys.argv[1:], run_command, label)

#!/usr/bin/env python3
"""Prints FileCheck lines with the numbers `kiln inspect` must report for a
zoo model of the given sizes, computed here from the architecture alone:

  expected.py mlp LAYERS BATCH           e.g. mlp 784,512,256,10 128
  expected.py lenet5 BATCH
  expected.py gpt LAYERS HIDDEN HEADS SEQ VOCAB BATCH

Parameters are f32 (4 bytes). FLOPs follow the counting rules of the kiln
ops (ir/Flops.h): a multiply-add is 2, elementwise ops 1 per element,
softmax and softmax cross-entropy 5 per element, layer norm 7, pooling one
per window element per output, the mean one per input element, data
movement 0. Integer inputs list the bound they are read under as indices
(the classes, the vocabulary), which kiln train checks data against.
"""
import sys


def mlp(layers, batch):
    pairs = list(zip(layers, layers[1:]))
    params = sum(i * o + o for i, o in pairs)
    flops = sum(2 * batch * i * o for i, o in pairs)     # matmuls
    flops += sum(batch * o for _, o in pairs)            # bias adds
    flops += sum(batch * o for _, o in pairs[:-1])       # ReLUs
    flops += 5 * batch * layers[-1] + batch              # loss
    inputs = [("x", "input", "%dx%d" % (batch, layers[0]), "f32"),
              ("labels", "label", "%d" % batch, "i32  indices below %d" % layers[-1])]
    return 2 * len(pairs), params, flops, inputs


def lenet5(batch):
    convs = [(1, 6, 28), (6, 16, 10)]  # in, out channels, output size
    params = sum(o * i * 25 + o for i, o, _ in convs)
    fcs = [(400, 120), (120, 84), (84, 10)]
    params += sum(i * o + o for i, o in fcs)
    flops = 0
    for i, o, size in convs:
        flops += 2 * batch * o * size * size * i * 25  # convolution
        flops += 2 * batch * o * size * size            # bias add, ReLU
        flops += 4 * batch * o * (size // 2) ** 2       # 2x2 max pool
    flops += sum(2 * batch * i * o + batch * o for i, o in fcs)
    flops += batch * (120 + 84)                         # ReLUs
    flops += 5 * batch * 10 + batch
    inputs = [("x", "input", "%dx1x28x28" % batch, "f32"),
              ("labels", "label", "%d" % batch, "i32  indices below 10")]
    return 10, params, flops, inputs


def gpt(layers, hidden, heads, seq, vocab, batch):
    h, t, b = hidden, seq, batch
    block = 2 * h + (3 * h * h + 3 * h) + (h * h + h) + 2 * h + \
        (4 * h * h + 4 * h) + (4 * h * h + h)
    params = vocab * h + t * h + layers * block + 2 * h  # tied lm head
    bth, scores = b * t * h, b * heads * t * t
    per_block = (7 * bth + 2 * bth * 3 * h + 3 * bth          # ln1, qkv
                 + 2 * scores * (h // heads) + 2 * scores     # q.k, scale, mask
                 + 5 * scores + 2 * scores * (h // heads)     # softmax, p.v
                 + 2 * bth * h + 2 * bth                      # proj, residual
                 + 7 * bth + 2 * bth * 4 * h + 8 * bth        # ln2, fc, gelu
                 + 2 * bth * 4 * h + 2 * bth)                 # proj, residual
    flops = bth + t * t + layers * per_block + 7 * bth
    flops += 2 * bth * vocab + 5 * b * t * vocab + b * t
    inputs = [("tokens", "input", "%dx%d" % (b, t), "i32  indices below %d" % vocab),
              ("targets", "label", "%dx%d" % (b, t), "i32  indices below %d" % vocab)]
    return 2 + 12 * layers + 2, params, flops, inputs


def main(argv):
    model, args = argv[1], argv[2:]
    if model == "mlp":
        tensors, params, flops, inputs = mlp(
            [int(s) for s in args[0].split(",")], int(args[1]))
    elif model == "lenet5":
        tensors, params, flops, inputs = lenet5(int(args[0]))
    elif model == "gpt":
        tensors, params, flops, inputs = gpt(*[int(a) for a in args])
    else:
        sys.exit("expected.py: unknown model " + model)
    print("CHECK: inputs:")
    for name, role, shape, dtype in inputs:
        print("CHECK-NEXT: {{^ *}}%s {{ *}}%s {{ *}}%s {{ *}}%s{{$}}"
              % (name, role, shape, dtype))
    print("CHECK: parameters: %d tensors, %d values{{.*}}, %d bytes"
          % (tensors, params, 4 * params))
    print("CHECK: FLOPs per forward step: %d{{$| }}" % flops)


if __name__ == "__main__":
    main(sys.argv)

"""Prints the fp16 loss-scale state of a `kiln train` checkpoint (slot
'state' of the optimizer): 'loss_scale S good_steps G skipped_steps K'.
Used by amp.test.

usage: print_loss_scale.py CHECKPOINT"""
import sys

from safetensors.numpy import load_file

t = load_file(sys.argv[1])
get = lambda name: float(t["optimizer/state/" + name].reshape(-1)[0])
print("loss_scale %g good_steps %g skipped_steps %g" % (
    get("loss_scale"), get("loss_scale.good_steps"),
    get("loss_scale.skipped_steps")))

# Prints how many `kiln.fusion gemm` regions of a printed module hold a
# kiln.gelu_grad, and for each such region whether its body is exactly
# the dot_general then a gelu_grad reading the product as dy, yielded
# (compile-gelu-grad.test).
import re
import sys

text = open(sys.argv[1]).read()
bodies = re.findall(r"kiln\.fusion gemm.*?kiln\.yield[^\n]*", text, re.S)
with_grad = [b for b in bodies if "kiln.gelu_grad" in b]
print(len(with_grad), "gemm fusions with gelu_grad")
for b in with_grad:
    ops = re.findall(r"^\s*(%\w+) = (kiln\.\w+) (.*)$", b, re.M)
    yielded = re.search(r"kiln\.yield (%\w+)", b).group(1)
    shape = "other"
    if len(ops) == 2 and ops[0][1] == "kiln.dot_general" and ops[1][1] == "kiln.gelu_grad":
        m = re.match(r"tanh, (%\w+), (%\w+) :", ops[1][2])
        if m and m.group(2) == ops[0][0] and m.group(1) != ops[0][0] and yielded == ops[1][0]:
            shape = "dot_general then gelu_grad tanh(x, dot): DGELU"
    print(shape)

//===- Passes.td - kiln passes ------------------------------*- tablegen -*-===//

#ifndef KILN_PASSES_TD
#define KILN_PASSES_TD

include "mlir/Pass/PassBase.td"

def KilnVerifyRoles : Pass<"kiln-verify-roles", "mlir::ModuleOp"> {
  let summary = "Check that a model module is well formed for training";
  let description = [{
    Every public function argument has a `kiln.role`; parameters have a
    `kiln.init`; a function marked with a loss result returns it as a 0-d
    float tensor. Runs first in the compile pipeline so later passes can
    rely on the roles.
  }];
  let dependentDialects = ["::kiln::KilnDialect"];
}

def KilnResolveMode : Pass<"kiln-resolve-mode", "mlir::ModuleOp"> {
  let summary = "Make a model a training step or an eval step";
  let description = [{
    A model graph is written as its training forward pass, as a PyTorch
    module in `train()` mode. `mode=train` keeps it so: each
    `kiln.mode_select` becomes its training value. `mode=eval` makes the
    graph what PyTorch's `eval()` mode computes: each `kiln.mode_select`
    becomes its eval value (a batch norm's running statistics), each
    `kiln.dropout` its operand (no dropout), and the results that update
    model state (`#kiln.role<model_state>`) are dropped, so evaluating a
    model changes none of its state. Ops left without a use are erased.

    The compile pipeline runs it right after kiln-verify-roles: `mode=train`
    for a training step, `mode=eval` for `--forward-only` and the eval step
    of `kiln train`.
  }];
  let options = [
    Option<"mode", "mode", "std::string", /*default=*/"\"train\"",
           "train (the training values) or eval (the eval values, no dropout, "
           "no model state updates)">,
  ];
  let dependentDialects = ["::kiln::KilnDialect"];
}

def KilnSyncBatchNorm : Pass<"kiln-sync-batch-norm", "mlir::ModuleOp"> {
  let summary = "Compute batch norm statistics over the global batch";
  let description = [{
    PyTorch's SyncBatchNorm for a data-parallel step of `world-size` ranks:
    each batch statistic (the training value of a `kiln.mode_select` whose
    eval value is a model-state argument, a running mean or variance) must
    be a `kiln.reduce` mean or sum over dimension 0. A batch norm's mean m
    and variance mean((x - m)^2) take one `kiln.all_gather` of every rank's
    [m_r, v_r] (each rank's variance about its own mean), combined as
    m = mean_r(m_r), v = mean_r(v_r) + mean_r((m_r - m)^2); any other
    statistic is followed by a `kiln.all_reduce` of its kind. Every use then
    reads the global statistic, so N ranks of batch B normalize as one rank
    of batch N*B; kiln-autodiff differentiates the collectives (the
    backward pass's reduce-scatter or all-reduce). A running variance
    updated with the unbiased batch variance (its constant is the mean's
    times n / (n - 1)) gets the global n, world-size times the rank's.
    Anything it cannot make global is an error naming the op: a statistic
    that is not such a reduction, or one computed from a local reduction
    over the batch.

    Runs on the model graph, before kiln-resolve-mode (the compile pipeline
    adds it with `--sync-batch-norm`, for a training step only).
  }];
  let options = [
    Option<"worldSize", "world-size", "int64_t", /*default=*/"1",
           "ranks the step is compiled for (the global batch is world-size "
           "times the model's)">,
  ];
  let dependentDialects = ["::kiln::KilnDialect"];
}

def KilnMarkIndexBounds : Pass<"kiln-mark-index-bounds", "mlir::ModuleOp"> {
  let summary = "Record the bound each integer data argument is read under";
  let description = [{
    An integer input or label is usually read as indices: the rows of a
    `kiln.gather`'s table, the slices of a `kiln.scatter_add`, the classes of
    a `kiln.softmax_cross_entropy`. The generated kernels clamp an index
    they cannot use, so data outside that range would train silently on the
    wrong rows. This pass follows each integer input and label argument of
    every public function through reshape, transpose, broadcast_in_dim,
    convert, slice and concatenate to those uses, and records the smallest
    bound as `kiln.index_bound = N : i64` on the argument (keeping a smaller
    one already there). The package records it (`SignatureEntry.index_bound`)
    and `kiln train` refuses data outside `[0, N)` when it opens the data.

    Runs right after kiln-verify-roles, on the graph as written: fusion
    later hides the uses. An argument no such use reads gets no bound.
  }];
  let dependentDialects = ["::kiln::KilnDialect"];
}

def KilnTestInterpret : Pass<"kiln-test-interpret", "mlir::ModuleOp"> {
  let summary = "Replace argument-free functions by their interpreted results";
  let description = [{
    For testing the reference interpreter in lit: every function without
    arguments is evaluated by the interpreter (ir/Interpreter.h) and its
    body replaced by `kiln.constant`s of the results, so FileCheck can check
    the values. Functions with arguments are left alone.
  }];
  let dependentDialects = ["::kiln::KilnDialect"];
}

def KilnApplyOptimizer : Pass<"kiln-apply-optimizer", "mlir::ModuleOp"> {
  let summary = "Turn gradients into parameter and optimizer-state updates";
  let description = [{
    Runs after kiln-autodiff. For each function that returns gradients
    (results with `kiln.role = #kiln.role<gradient>` and `kiln.grad_of`), adds
    the optimizer state as arguments (`#kiln.role<optimizer_state>`,
    initialized to zeros) and a step counter (`#kiln.role<step>`, a 0-d i64),
    and replaces the gradient results by the updated parameters, the updated
    state and the next step. Every update result carries `kiln.updates =
    <argument index>`, so buffer planning can update in place.

    The optimizer and hyper-parameters come from the module's
    `kiln.training` attribute; each pass option overrides one field, and the
    attribute is rewritten with the values used. Optimizers follow
    torch.optim: SGD (weight decay added to the gradient), momentum
    (optionally Nesterov), Adam (L2 weight decay added to the gradient) and
    AdamW (decoupled weight decay), with bias correction and eps outside the
    square root. `clip-norm > 0` scales all gradients by
    min(1, clip / (global norm + 1e-6)) first, as clip_grad_norm_. The
    learning rate follows the schedule, computed in the graph from the step:
    constant; or linear warm-up over `warmup-steps` to the peak, then cosine
    or linear decay to zero at `total-steps`.

    With fp16 loss scaling (optimizer-state arguments `loss_scale`,
    `loss_scale.good_steps`, `loss_scale.skipped_steps`, added by
    kiln-auto-mixed-precision) the gradients are first divided by the
    scale. When any of them is inf or NaN, every parameter and optimizer
    state keeps its value (the step counter still advances), the scale is
    halved, `good_steps` reset and `skipped_steps` incremented; otherwise
    `good_steps` counts up and at 2000 the scale doubles (at most 2^24) and
    `good_steps` restarts.
  }];
  let options = [
    Option<"optimizer", "optimizer", "std::string", /*default=*/"\"\"",
           "sgd, momentum, adam or adamw (default: the module's kiln.training, else sgd)">,
    Option<"learningRate", "lr", "double", /*default=*/"-1.0", "learning rate (peak)">,
    Option<"momentum", "momentum", "double", /*default=*/"-1.0", "momentum factor">,
    Option<"nesterov", "nesterov", "int", /*default=*/"-1", "Nesterov momentum (0 or 1)">,
    Option<"beta1", "beta1", "double", /*default=*/"-1.0", "Adam beta1">,
    Option<"beta2", "beta2", "double", /*default=*/"-1.0", "Adam beta2">,
    Option<"epsilon", "eps", "double", /*default=*/"-1.0", "Adam epsilon">,
    Option<"weightDecay", "weight-decay", "double", /*default=*/"-1.0", "weight decay">,
    Option<"clipNorm", "clip-norm", "double", /*default=*/"-1.0",
           "global gradient-norm clipping threshold (0: off)">,
    Option<"schedule", "schedule", "std::string", /*default=*/"\"\"",
           "constant, warmup_cosine or warmup_linear">,
    Option<"warmupSteps", "warmup-steps", "int64_t", /*default=*/"-1", "warm-up steps">,
    Option<"totalSteps", "total-steps", "int64_t", /*default=*/"-1", "steps until the decay ends">,
  ];
  let dependentDialects = ["::kiln::KilnDialect"];
}

def KilnConvertFloatsToF64 : Pass<"kiln-convert-floats-to-f64", "mlir::ModuleOp"> {
  let summary = "Compute every floating-point tensor in f64";
  let description = [{
    Rewrites every f32, f16 and bf16 tensor type (arguments, results, ops,
    constants) to f64. `kiln gradcheck` runs the training step this way so
    that finite differences are accurate.
  }];
  let dependentDialects = ["::kiln::KilnDialect"];
}

def KilnAutodiff : Pass<"kiln-autodiff", "mlir::ModuleOp"> {
  let summary = "Reverse-mode autodiff: append the gradient of every parameter";
  let description = [{
    For each public function with a result marked `kiln.role =
    #kiln.role<loss>` (a 0-d float tensor), appends one result per argument
    with `#kiln.role<parameter>`: the gradient of the loss with respect to
    that parameter, marked `kiln.role = #kiln.role<gradient>`, `kiln.name`
    (the parameter's name) and `kiln.grad_of = <argument index>`.

    The body is walked in reverse from the loss; each op on a path from a
    parameter to the loss builds its operands' gradients through its
    `Differentiable` interface (ir/gradients/), and a value used several
    times accumulates its gradients with `kiln.add`. The loss's gradient is 1,
    or, with fp16 loss scaling (an optimizer-state argument named
    `loss_scale`, added by kiln-auto-mixed-precision), that scale. An op on such a path
    without the interface is an error naming it. A parameter with no path to
    the loss gets a zero gradient and a remark. The output is ordinary kiln
    IR; run canonicalize and CSE after it to drop the unused parts of the
    rules.

    `remat=dots` (activation checkpointing, passes/Rematerialize.cpp): the
    backward pass recomputes the forward values it reads, from the kept
    ones, right before it reads them: kept are the outputs of matmuls,
    convolutions, attention (and a bias or residual add straight on a
    matmul), collectives and ops with regions, the arguments, data movement
    of kept values, and values more than one forward op reads; the clones
    carry `kiln.remat` (so CSE does not merge them back). `remat=full`
    recomputes the matmuls, convolutions and attention too. `remat-scope`
    (a regular expression over node names) limits recomputation to the ops
    it matches. `remat-limit=K` recomputes only K of the candidates (values
    the backward pass reads that the policy would recompute), taken greedily
    on a memory profile of the step: at each peak, the candidate kept across
    it that is cheapest to recompute per byte; the function records its
    candidates in `kiln.remat_candidates`. `remat=off` (the default) keeps every value the
    backward pass reads.
  }];
  let options = [
    Option<"remat", "remat", "std::string", /*default=*/"\"off\"",
           "off (keep every forward value the backward pass reads), dots "
           "(recompute all but matmul, convolution and attention outputs "
           "and values several forward ops read) or full (recompute the "
           "matmuls too)">,
    Option<"rematScope", "remat-scope", "std::string", /*default=*/"",
           "with remat: recompute only values made by ops one of whose node "
           "names (locations) matches this regular expression (default: "
           "every op)">,
    Option<"rematLimit", "remat-limit", "int64_t", /*default=*/"-1",
           "with remat: recompute only this many of the values the policy "
           "would, the cheapest per byte freed at the peak first (-1, the "
           "default: all of them); kiln compile --memory-budget chooses it">,
  ];
  let dependentDialects = ["::kiln::KilnDialect"];
}

def KilnAccumulateGradients : Pass<"kiln-accumulate-gradients", "mlir::ModuleOp"> {
  let summary = "Gradient accumulation: K micro-batches in one training step";
  let description = [{
    Runs after kiln-autodiff and before kiln-distribute and
    kiln-apply-optimizer, on functions that return gradients. With
    `grad-accum` K > 1, every batch argument (`#kiln.role<input>` and
    `#kiln.role<label>`, batch dimension B first) takes K*B rows, and the
    forward and backward computation is cloned K times, clone k reading rows
    [k*B, (k+1)*B) through `kiln.slice`. Each gradient is added to its
    running sum right after clone k produces it, and the step returns the
    sums divided by K, and the mean of the K losses. For a loss that is a
    mean over the batch this equals the gradient of one batch of K*B rows;
    for a loss summed over the batch it is that gradient divided by K.
    Outputs with the batch dimension first are concatenated, other float
    outputs averaged. The clones follow one another, so micro-batch k's
    activations die before micro-batch k + 1 starts: each slice and each
    running-sum step is a `kiln.fusion` of its own, which kiln-fuse leaves
    alone (the compile pipeline also turns off kiln-fuse's sibling fusion
    when K > 1), so no kernel mixes micro-batches. Micro-batch k's
    `kiln.dropout` ops get seed + k * 0x9E3779B97F4A7C15, so the
    micro-batches draw different masks. kiln-distribute then reduces the
    accumulated gradients once per step. K = 1 changes nothing; K < 1 is an
    error.

    Example: `kiln-opt --kiln-autodiff --kiln-accumulate-gradients="grad-accum=4"`.
  }];
  let options = [
    Option<"gradAccum", "grad-accum", "int64_t", /*default=*/"1",
           "micro-batches per step (K)">,
  ];
  let dependentDialects = ["::kiln::KilnDialect"];
}

def KilnDistribute : Pass<"kiln-distribute", "mlir::ModuleOp"> {
  let summary = "Insert the collectives of a distribution strategy";
  let description = [{
    Runs after kiln-autodiff and before kiln-apply-optimizer, on functions
    that return gradients (`kiln.role = #kiln.role<gradient>`), so the
    optimizer updates with the reduced gradients and every rank applies the
    same update.

    `data-parallel` (PyTorch DDP): every gradient is averaged over the ranks
    (`kiln.all_reduce mean`). Gradients are packed into buckets in the order
    the backward pass completes them (the first bucket closes at 1 MB, or
    `bucket-mb` when that is smaller, the others at `bucket-mb` MB; a gradient is never split; one element type
    per bucket): each is reshaped to 1-D, the bucket concatenated into one
    buffer, all-reduced once, and sliced back. The pack, the collective and
    the unpack are inserted right after the bucket's last gradient is
    produced, so the collective overlaps the rest of the backward pass
    (kiln-schedule keeps collectives as early as their inputs allow). The
    loss result joins the last bucket of its element type, so every rank
    reports the global batch's mean loss. The IR depends only on the input,
    so every rank issues the same collectives in the same order. The module
    gets `kiln.strategy` and `kiln.world_size` for the package metadata.

    `grad-compression=bf16|fp16` converts each f32 bucket to that precision
    before its all-reduce and back after it (PyTorch's compress hooks): half
    the bytes travel; the gradients and the optimizer stay f32. The loss
    then gets its own f32 all-reduce.

    `zero1`, `zero2`, `zero3` (DeepSpeed ZeRO, PyTorch FSDP): the same
    buckets, each flattened and zero-padded to a multiple of `world-size`
    N; rank r owns block r, its shard. Each bucket adds an argument, the
    shard (role parameter, `zero.bucketK`, with `kiln.shard`: bucket,
    world size, unpadded length, and each parameter's name, offset, shape
    and initializer), whose
    gradient result is the `kiln.reduce_scatter mean` of the flat gradient
    bucket; the full parameters' gradients are no longer results, so
    kiln-apply-optimizer updates the shards and creates shard-sized
    optimizer state. zero1 reduce-scatters every bucket after the whole
    backward pass (marked `kiln.issue_together`, so kiln-schedule keeps
    them there: stage 1), zero2 right after the bucket's last gradient.
    Both keep the full parameters as arguments; kiln-gather-shards
    refreshes them from the all-gathered updated shards. zero3 removes the
    parameter arguments (FSDP, resharded after the forward pass): each
    bucket's `kiln.all_gather` of its shard, sliced and reshaped into the
    parameters, comes right before the forward pass (the ops the loss
    depends on) first reads it, and again right before the backward pass
    first reads it (only if it does), per micro-batch under gradient
    accumulation; the gathers carry `kiln.prefetch = 1`
    (kiln-schedule issues each one bucket ahead). The loss gets its own
    all-reduce mean. The IR depends on N (the shard sizes).

    `none` changes nothing; other strategies are refused by name.
    With gradient accumulation (`grad-accum` K > 1) kiln-accumulate-gradients
    has already summed the K micro-batches' gradients, so the buckets hold
    the accumulated gradients and their collectives run once, after the last
    micro-batch's backward pass.

    Example: `kiln-opt --kiln-autodiff --kiln-distribute="strategy=data-parallel world-size=2"`.
  }];
  let options = [
    Option<"strategy", "strategy", "std::string", /*default=*/"\"data-parallel\"",
           "none, data-parallel, mirrored, zero1, zero2 or zero3">,
    Option<"worldSize", "world-size", "int64_t", /*default=*/"1",
           "number of ranks (recorded for the package)">,
    Option<"bucketMb", "bucket-mb", "double", /*default=*/"25.0",
           "bucket size in MB after the first (1 MB) bucket">,
    Option<"gradAccum", "grad-accum", "int64_t", /*default=*/"1",
           "micro-batches per step (accumulated by kiln-accumulate-gradients; at least 1)">,
    Option<"gradCompression", "grad-compression", "std::string", /*default=*/"\"none\"",
           "precision of the all-reduce: none, bf16 or fp16">,
  ];
  let dependentDialects = ["::kiln::KilnDialect"];
}

def KilnGatherShards : Pass<"kiln-gather-shards", "mlir::ModuleOp"> {
  let summary = "ZeRO-1/2: all-gather the updated shards into the parameters";
  let description = [{
    Runs after kiln-apply-optimizer under kiln-distribute's `zero1` and
    `zero2`. For every shard argument (`kiln.shard`) whose parameters are
    still arguments, the updated shard is `kiln.all_gather`ed into the full
    flat bucket, and each parameter's slice, reshaped, becomes a result
    that updates that parameter (`kiln.updates`). Under `zero3` (no
    parameter arguments) nothing changes.
  }];
  let dependentDialects = ["::kiln::KilnDialect"];
}

def KilnParameterCopies : Pass<"kiln-parameter-copies", "mlir::ModuleOp"> {
  let summary = "Keep mixed precision's low-precision parameter copies as step state";
  let description = [{
    Runs after kiln-apply-optimizer (and kiln-gather-shards) on a mixed
    precision training step. Each f32 parameter that the step converts to a
    narrower float type (kiln-auto-mixed-precision's casts) and updates
    (a `kiln.updates` result), and that is not a ZeRO shard, gets a copy per
    such type instead: a new argument (`#kiln.role<parameter_copy>`, named
    `<parameter>.bf16` or `.f16`, `kiln.copy_of` = the parameter's index)
    replaces every one of those converts, and a new result, the convert of
    the updated parameter, updates it. The optimizer update's kernel then
    writes the copy beside the new parameter, and no kernel converts the
    parameters at the start of the step (Megatron-LM's and DeepSpeed's bf16
    parameters with f32 master weights). The step's values are unchanged:
    the copy is the convert of the parameter it is read beside. The runtime
    fills a copy from its parameter whenever it sets the parameter and never
    checkpoints it.
  }];
  let dependentDialects = ["::kiln::KilnDialect"];
}

def KilnFuseAttention : Pass<"kiln-fuse-attention", "mlir::ModuleOp"> {
  let summary = "Rewrite primitive scaled-dot-product attention into kiln.attention";
  let description = [{
    Finds `dot_general(q, k)` (batch [0, 1] x [0, 1], contract [3] x [3]),
    optionally multiplied by a splat constant (either operand), optionally
    masked by `select(mask, s, -inf)`, then `softmax` over dimension 3 and
    `dot_general(p, v)` (batch [0, 1] x [0, 1], contract [3] x [2]), with
    q [B, H, Tq, D], k [B, H, Tk, D], v [B, H, Tk, Dv] of one float type
    (f16, bf16, f32, f64) and every intermediate used once, and replaces it
    by `kiln.attention %q, %k, %v {scale, causal}` whose location fuses the
    matched ops'. A mask is accepted only when it is provably the top-left
    causal mask (key j visible to query i iff j <= i): it must be computed
    from constants alone (iota, compare, broadcast_in_dim, ...), and the
    pass evaluates it with the reference interpreter (a final broadcast over
    the batch and head dimensions is not expanded; at most 2^22 elements
    per tensor) and compares every element. Anything else is left as it is.

    The compile pipeline runs it first, before mixed precision and
    autodiff, for `--target=cuda` only (PipelineOptions::fuseAttention,
    `--fuse-attention=on|off`): there kiln.attention and its gradient
    kiln.attention_grad are fused library calls; other targets would only
    decompose them again.
  }];
  let statistics = [
    Statistic<"numFused", "fused", "attention patterns rewritten into kiln.attention">,
  ];
  let dependentDialects = ["::kiln::KilnDialect"];
}

def KilnPackAttention : Pass<"kiln-pack-attention", "mlir::ModuleOp"> {
  let summary = "Let fused attention read and write its qkv projection in place";
  let description = [{
    Rewrites `kiln.attention %q, %k, %v` whose operands are the three thirds
    of one projection X ([B, T, 3HD]), each sliced from X's last dimension,
    reshaped to [B, T, H, D] and transposed to [B, H, T, D], into
    `kiln.attention_qkv` over X reshaped to [B, T, 3, H, D]. Its out is
    [B, T, H, D]: users that transposed out back to token-major read it
    directly. Each `kiln.attention_grad` of that forward becomes
    `kiln.attention_qkv_grad` (dout taken before the transpose that made it
    head-major, when there is one); when dq, dk and dv only feed the
    gradient of the split (transposed back, reshaped to [B, T, HD], padded
    into their thirds and summed), the sum becomes dqkv reshaped to
    [B, T, 3HD]; other users of dq, dk and dv read slices of dqkv. Anything
    else is left as it is.

    The compile pipeline runs it for `--target=cuda` (with
    `--fuse-attention=on`) after kiln-decompose and before kiln-fuse, so
    that the fused kernels read the projection in place and the layout
    copies around every attention disappear.
  }];
  let statistics = [
    Statistic<"numPacked", "packed", "kiln.attention ops rewritten into kiln.attention_qkv">,
    Statistic<"numGradientsPacked", "gradients-packed",
              "qkv gradients summed from pads replaced by dqkv">,
  ];
  let dependentDialects = ["::kiln::KilnDialect"];
}

def KilnSplitReductions : Pass<"kiln-split-reductions", "mlir::ModuleOp"> {
  let summary = "Sum wide column reductions in two stages, for GPU parallelism";
  let description = [{
    Rewrites a float `kiln.reduce` over the leading dimensions of its
    operand (R rows, K results, as a layer norm's scale gradient sums
    [B, T, C] over B and T) into a reduction of R1 groups of R / R1 rows
    ([R1, K] partials) followed by a reduction of the R1 partials. A
    generated CUDA kernel computes a column reduction with one thread per
    result summing its rows in order, so without the split K = 768 results
    keep three blocks busy streaming 8192 rows each while the rest of the
    GPU idles. R1 is the smallest power of two dividing R with
    R1 * K >= target-partials and R / R1 <= max-rows (R / R1 stays >= 16).
    f16 and bf16 operands
    are summed in f32 and rounded once at the end, as before; only the
    order of the additions changes. Integer reductions, other dimensions,
    K >= target-partials or R < min-reduced are left alone, and so are
    bias gradients (sums of a weight gradient's rhs over the rows it
    contracts) while keep-bias-gradients is on: kiln-fuse hands those to
    the GEMM's cuBLASLt epilogue.

    A float reduction over leading and trailing dimensions with kept ones
    between them (a convolution's bias gradient or a batch norm's
    statistics, [N, C, H, W] over N, H and W) becomes the trailing
    reduction (N x C results) followed by the leading one, itself split as
    above where it is long; the same thresholds apply (at least
    min-reduced elements, fewer than target-partials results), and a
    single leading or trailing element leaves it alone.

    The compile pipeline runs it for `--target=cuda` before kiln-fuse.
  }];
  let options = [
    Option<"minReduced", "min-reduced", "int64_t", /*default=*/"1024",
           "Split only reductions over at least this many rows">,
    Option<"targetPartials", "target-partials", "int64_t", /*default=*/"32768",
           "Partial results (threads of work) the first stage aims for; "
           "reductions with this many results are left alone">,
    Option<"maxRows", "max-rows", "int64_t", /*default=*/"32",
           "Rows one thread of the first stage sums at most">,
    Option<"keepBiasGradients", "keep-bias-gradients", "bool", /*default=*/"true",
           "Leave sums of a weight gradient's rhs over its contracted rows "
           "(kiln-fuse's bias-gradient epilogues compute them)">,
  ];
  let statistics = [
    Statistic<"numSplit", "split", "column reductions split in two stages">,
  ];
  let dependentDialects = ["::kiln::KilnDialect"];
}

def KilnAutoMixedPrecision : Pass<"kiln-auto-mixed-precision", "mlir::ModuleOp"> {
  let summary = "Run matmuls and convolutions in bf16 or fp16, keep f32 master weights";
  let description = [{
    Runs on the forward graph, before kiln-autodiff, in the spirit of
    TensorFlow's auto_mixed_precision rewrite. Every op is in one list:

    - allow (`dot_general`, `conv2d`, `conv2d_input_grad`,
      `conv2d_filter_grad`, `attention`): computed in the low precision
      (`amp`), its f32 operands converted (kiln.attention's `lse` result
      stays f32, as the op requires);
    - deny (`exp`, `log`, `log1p`, `pow`, `softmax`, `log_softmax`,
      `softmax_cross_entropy`, `layer_norm`, `reduce`): computed in f32, its
      low-precision operands converted back; the loss and norms' statistics
      stay f32 this way;
    - infer (every elementwise op, and `reshape`, `transpose`,
      `broadcast_in_dim`, `slice`, `concatenate`, `pad`, `gather`,
      `max_pool2d`, `avg_pool2d`, `dropout`): f32 when an operand comes
      from a deny op or f32 work after one, low precision when an operand is
      low precision, otherwise unchanged;
    - any other op: f32.

    `allow=`, `deny=` and `infer=` move ops (by name, `dot_general` or
    `kiln.dot_general`) into a list. Only f32 work is retyped: arguments,
    results, constants and ops on other float types keep their types, so
    parameters stay f32 (master weights) and the function's results (the
    loss, logits) are converted back to f32. Casts are `kiln.convert` ops,
    one per use of a value, so that kiln-autodiff converts each use's
    gradient to f32 before adding them up: gradients accumulate in f32 and
    reach the optimizer in the parameter's type. CSE merges the duplicate
    forward converts, and kiln-fuse fuses every convert into a kernel.

    With `amp=fp16` and `loss-scaling` (the default), a function with a loss
    gets dynamic loss scaling as three 0-d f32 optimizer-state arguments:
    `loss_scale` (initialized to 65536), `loss_scale.good_steps` and
    `loss_scale.skipped_steps` (zeros). kiln-autodiff then starts the
    backward pass from the scale instead of 1, and kiln-apply-optimizer
    divides the gradients by it; when any gradient is inf or NaN it keeps
    the parameters and the optimizer state (the step counter still
    advances, as TensorFlow's LossScaleOptimizer does), halves the scale,
    resets `good_steps` and counts the skip; after 2000 consecutive finite
    steps it doubles the scale (at most 2^24). bf16 has f32's range and
    gets no scaling.

    Example: `kiln-opt --kiln-auto-mixed-precision="amp=bf16 deny=gelu"`.
  }];
  let options = [
    Option<"amp", "amp", "std::string", /*default=*/"\"bf16\"",
           "the low precision: bf16 or fp16">,
    Option<"lossScaling", "loss-scaling", "bool", /*default=*/"true",
           "fp16: add dynamic loss scaling to functions with a loss">,
    ListOption<"allow", "allow", "std::string",
               "ops to compute in low precision (comma-separated names)">,
    ListOption<"deny", "deny", "std::string",
               "ops to compute in f32 (comma-separated names)">,
    ListOption<"infer", "infer", "std::string",
               "ops that follow their inputs (comma-separated names)">,
  ];
  let dependentDialects = ["::kiln::KilnDialect"];
}

def KilnDecompose : Pass<"kiln-decompose", "mlir::ModuleOp"> {
  let summary = "Rewrite composite ops into fusible primitives";
  let description = [{
    Rewrites softmax, log_softmax (maximum subtracted first), layer_norm,
    softmax_cross_entropy (logsumexp minus the label's logit, picked with
    iota, compare and select, then summed) and reduce mean (sum divided by
    the count) into elementwise ops, broadcast_in_dim and reduce sum/max,
    so kiln-fuse can merge their parts with their neighbours. dot_general
    and the convolutions stay whole for the libraries. The decompositions
    perform the reference semantics' arithmetic in the same order, so f64
    results are bit-identical on the interpreter.

    kiln.argmax becomes the index of the first element equal to the
    reduce max along its dimension (or, where the max is NaN, of the first
    NaN): compare, iota, select and a reduce min, as the reference picks.

    kiln.avg_pool2d (padded elements counted) becomes a depthwise
    kiln.conv2d (groups = channels) with a constant filter of 1/(kh kw),
    and kiln.avg_pool2d_grad that convolution's kiln.conv2d_input_grad,
    which the backends run as convolutions.

    kiln.gelu is elementwise already and is what the GEMM epilogue fusion
    matches (cuBLASLt's GELU epilogues), so it is kept unless `gelu=true`,
    which writes it as its scalar formula with kiln elementwise ops.

    kiln.attention and kiln.attention_grad become dot_general, the softmax
    pieces and, when causal, an iota/compare/select mask, computed in f32
    (f64 for f64 operands) like the fused kernel, unless `attention=false`
    (the CUDA pipeline, where a fused kernel runs them whole).
  }];
  let options = [
    Option<"gelu", "gelu", "bool", /*default=*/"false",
           "also decompose kiln.gelu (both forms) into elementwise ops">,
    Option<"attention", "attention", "bool", /*default=*/"true",
           "decompose kiln.attention and kiln.attention_grad into primitives">,
  ];
  let dependentDialects = ["::kiln::KilnDialect"];
}

def KilnFuse : Pass<"kiln-fuse", "mlir::ModuleOp"> {
  let summary = "Group ops into kernels (kiln.fusion), XLA priority-fusion style";
  let description = [{
    Groups the ops of every function body into `kiln.fusion` regions, one
    per kernel, guided by a cost model (passes/FusionCostModel.h): a kernel
    costs a launch plus the longer of moving its bytes (each distinct input
    read once, each result written once) and doing its arithmetic; a merge
    is worth the modelled time it saves. In order:

    1. GEMM epilogues (kind `gemm`): a dot_general with what cuBLASLt
       epilogues take after it: a bias add (a 1-D vector broadcast along the
       last dimension), a residual add (a tensor of the result's type), then
       relu or tanh-gelu, whose input may also be a result (the AUX output).
       The dot_general is the region's first op. With
       `bias-gradient-epilogues` (CUDA), a weight gradient's dot_general
       whose rhs is [rows..., n] contracted over the rows also takes the
       reduce-sum of that rhs over the rows (the bias gradient, cuBLASLt
       BGRADA) as a second result. With `gelu-grad-epilogues` (CUDA), a
       dot_general whose only user is a tanh `kiln.gelu_grad` reading it as
       `dy` takes that gelu_grad, its `x` a fusion input (cuBLASLt DGELU).
    2. Priority fusion: candidate merges go into a priority queue by the
       time they save and the best is applied first, until none saves time:
       producer into consumer (loop fusion of elementwise ops and data
       movement as index maps; reduction fusion of a reduce with its
       producers and elementwise consumers, kind `reduction`; a producer
       with other users stays a result: multi-output), a copy of a cheap
       producer (no reduce) into consumers (the original goes when no user
       is left), and siblings that read the same input of at least
       `sibling-min-bytes` (kind `multi_output`). A scatter_add (an
       embedding's gradient) fuses with its elementwise consumers of its
       shape, its operand a splat constant or an input (so no kernel
       writes the zeros it scatters onto, and the optimizer update reading
       the gradient is in the same kernel); its indices and updates come
       from outside, it is never copied, never in a kernel with a reduce,
       and one per kernel: kernels work through it a result row at a time
       (CUDA: codegen/cuda/CudaEmitter.h's scatter rows).
    3. Horizontal fusion (kind `horizontal`): independent loop kernels whose
       results all go to the same consumer, such as every parameter's
       optimizer update feeding the function's return, packed into as few
       kernels as the operand limits allow (a scatter_add's kernel stays
       apart). With `horizontal-reductions`
       (CUDA), independent reduction kernels that the CUDA emitter builds
       with a warp per result (a reduce over the last dimension of fewer
       than 2048 elements, or a column reduction of 32 to 2047 rows and at
       most 4096 results; every result of the reduced shape) are packed the
       same way, only with others whose reduces have the same operand shape
       and reduced dimensions (a layer norm's scale and bias gradients with
       their optimizer updates); each keeps units of its own in the kernel.

    With `row-group-partials` (CUDA), a reduction kernel over rows of C
    elements (every row reduce over the last dimension of one shape
    [R..., C]) may also hold row-group partials: reduce sums
    `reduce(reshape(v, [G, S, C]), dims=[1])` of a value v of the row shape,
    S <= 32 (kiln-split-reductions' groups; `reduce(v, dims=[1])` when the
    rows are [G, S, C], the reshape folded away), with elementwise ops of the
    [G, C] result after them; so a layer norm's dx kernel and its scale and
    bias gradients' first stage, siblings reading x and dy, become one
    kernel (the CUDA emitter's rowgroup.block layout reads each element
    once for both).

    Never fused: library ops (dot_general outside its epilogue, the
    convolutions), collectives (and nothing across one: merges that would
    put a collective between two parts of one kernel are cycles and are
    refused), other ops outside the fusion rules (gather, pools, ...) and
    existing fusions. A reduce, a dot_general or a convolution is never
    copied. All reduces in one kernel share their operand shape and reduced
    dimensions (but for row-group partials above); a reduction kernel that broadcasts a reduced value back over
    the row must fit the row in `shared-memory-bytes`. Every fusion has at
    most `max-inputs` inputs and `max-outputs` results. Constants that are
    splats or tiny are copied into the regions; reshapes are bitcasts and
    stay outside unless both ends are inside. A fusion's location fuses its
    ops' locations, so dumps name the source nodes.
  }];
  let options = [
    Option<"bandwidthGBps", "bandwidth-gbps", "double", /*default=*/"3350.0",
           "memory bandwidth the cost model assumes (GB/s)">,
    Option<"launchUs", "launch-us", "double", /*default=*/"2.0",
           "cost of one kernel launch (microseconds)">,
    Option<"peakGflops", "peak-gflops", "double", /*default=*/"60000.0",
           "arithmetic peak the cost model assumes (GFLOP/s)">,
    Option<"maxInputs", "max-inputs", "int64_t", /*default=*/"32",
           "most inputs of one fusion">,
    Option<"maxOutputs", "max-outputs", "int64_t", /*default=*/"32",
           "most results of one fusion">,
    Option<"sharedMemoryBytes", "shared-memory-bytes", "int64_t", /*default=*/"49152",
           "on-chip bytes for one row of a reduction kernel that reuses it">,
    Option<"siblingMinBytes", "sibling-min-bytes", "int64_t", /*default=*/"4096",
           "smallest shared input that makes siblings worth a multi-output fusion">,
    Option<"gemmEpilogues", "gemm-epilogues", "bool", /*default=*/"true",
           "fuse bias, residual and activation into dot_general">,
    Option<"biasGradientEpilogues", "bias-gradient-epilogues", "bool",
           /*default=*/"false",
           "fuse the reduce-sum of a weight gradient's rhs over its rows (the "
           "bias gradient) into the dot_general (cuBLASLt BGRADA; CUDA)">,
    Option<"geluGradEpilogues", "gelu-grad-epilogues", "bool",
           /*default=*/"false",
           "fuse a tanh kiln.gelu_grad(x, dot) into the dot_general that is "
           "its only dy (cuBLASLt DGELU; CUDA)">,
    Option<"horizontal", "horizontal", "bool", /*default=*/"true",
           "pack independent loop kernels into horizontal fusions">,
    Option<"horizontalReductions", "horizontal-reductions", "bool",
           /*default=*/"false",
           "also pack independent warp-per-result reduction kernels of one "
           "layout into horizontal fusions (CUDA)">,
    Option<"rowGroupPartials", "row-group-partials", "bool",
           /*default=*/"false",
           "let a reduction kernel over rows also hold sums of groups of at "
           "most 32 of its rows (reduce(reshape(v, [G, S, C]), dims=[1])), "
           "which the CUDA rowgroup.block layout builds beside the rows">,
    Option<"report", "report", "bool", /*default=*/"false",
           "emit a remark per function with its kernels and modelled bytes, "
           "and how much work the plan took (trials, prices kept, kernels "
           "priced, successor lists, ops examined)">,
    Option<"verifyCaches", "verify-caches", "bool", /*default=*/"false",
           "after every committed move, compute each live kernel's "
           "successors, predecessors, results, op-list summary and modelled "
           "time afresh and check the kept topological order against the "
           "edges; price again each move whose kept price is used; check "
           "each merge's or copy's summary and results, worked out from its "
           "parts', against a walk of its ops; fail if a kept or derived "
           "answer differs (a check for tests; slow)">,
  ];
  let dependentDialects = ["::kiln::KilnDialect"];
}

def KilnSchedule : Pass<"kiln-schedule", "mlir::ModuleOp"> {
  let summary = "Order each function's kernels to lower the peak of live memory";
  let description = [{
    Reorders the top-level ops of every function body (each a kernel: a
    kiln.fusion or a single op), respecting data dependences and the order
    of ops with side effects, to lower the peak of simultaneously live
    bytes. It builds a greedy list schedule (the ready op that frees the most
    bytes net of what it allocates runs first, so ops that allocate big
    buffers wait until they are needed) and a post-order walk from the
    returned values (larger subgraph first), estimates each order's peak and
    keeps the lowest; the original order wins a tie. In every order each
    collective is moved up to start as soon as its inputs exist, together
    with the ops whose results only it (through them) reads, such as a
    gradient bucket's producers and packing (collectives keep their
    relative order: every rank issues them in the same order).
    Deterministic; every order is topological, so dominance always holds.

    Two attributes on collectives (set by kiln-distribute) hold one back,
    as extra dependences that every order respects:
    - `kiln.prefetch = D` (on `kiln.all_gather`): among the collectives
      carrying it, in order, the k-th is issued only after every use of the
      (k-1-D)-th, where a use reads the gathered buffer (or a slice,
      reshape or copy of it alone) together with anything else. With
      D = 1 (zero3) a bucket is gathered while the one before it computes,
      and at most two gathered buckets are in use or in flight (FSDP's
      forward and backward prefetch), instead of every gather at the start.
    - `kiln.issue_together` (unit): none of the collectives carrying it
      starts before the inputs of all of them exist, their own packing
      (reshapes, concatenation, constants) aside; zero1's reduce-scatters
      so wait for the end of the backward pass.
    And an in-place update (a result returned for the argument it replaces,
    `kiln.updates`: an optimizer step) is produced only after every other
    op reading that argument, since kiln-plan-buffers writes it over the
    argument only then (else it gets its own buffer and a copy after every
    step).
    A rule's dependence that would close a cycle is left out.
  }];
  let options = [
    Option<"reportPeaks", "report-peaks", "bool", /*default=*/"false",
           "emit a remark per function with each order's estimated peak">,
  ];
  let dependentDialects = ["::kiln::KilnDialect"];
}

def KilnPlanBuffers : Pass<"kiln-plan-buffers", "mlir::ModuleOp"> {
  let summary = "Plan every kernel result's buffer: in place, or an arena offset";
  let description = [{
    Liveness over the current op order (run kiln-schedule first): top-level
    op i writes its results at step i, a value lives until its last reader,
    and returned values until the end. Then:

    - Updated parameters, optimizer state and the step (results with
      `kiln.updates = i`) are written over argument i's buffer when that is
      safe: argument i (or a reshape of it) is last read before the op that
      writes the update, or by that op itself reading it elementwise.
      Otherwise the update gets an arena buffer and a remark says why.
    - A reshape names its operand's bytes (a view).
    - An elementwise op, or a fusion whose input feeds the result only
      through elementwise ops of its shape, may write its result over an
      operand of the same size that dies there.
    - Offsets in one arena come from a best-fit heap simulation
      (passes/BufferPlanner.h); an independent checker then proves that no
      two buffers live at the same step overlap, and the pass fails with an
      internal error if they do.

    Each top-level op gets `kiln.buffer_offsets = array<i64: ...>`, one
    arena offset per result (-1 for a result that lives in an argument's
    buffer, named by `kiln.aliases = array<i64: ...>`, one argument index or
    -1 per result). The function gets `kiln.arena_bytes` (the arena's size),
    `kiln.peak_bytes` (the planned peak: its arguments' buffers plus the
    arena) and `kiln.lower_bound_bytes` (its arguments' buffers plus the
    largest sum of simultaneously live arena bytes).
  }];
  let options = [
    Option<"alignment", "alignment", "int64_t", /*default=*/"64",
           "alignment of every arena buffer in bytes (a power of two)">,
    Option<"report", "report", "bool", /*default=*/"false",
           "print the buffer-assignment report of each function to stderr">,
  ];
  let dependentDialects = ["::kiln::KilnDialect"];
}

#endif // KILN_PASSES_TD

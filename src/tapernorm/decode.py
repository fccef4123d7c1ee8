"""Decoding with a preallocated KV cache: prefill, one-token steps (eager or compiled), sampling.

This engine sits below the model (tapernorm.model imports it for GPT.generate; it imports no model
code): it owns the KV caches and drives the model's own paths. A decoder is a pair of functions
over one cache of `max_len` positions:

    prefill(prompt (B, P)) -> logits (B, V) of the last prompt position; caches positions 0..P-1
    step(token (B, 1), pos) -> logits (B, V) of `token` fed at position `pos`; caches it there

The prefill is GPT.hidden with the cache. eager_decoder's step is GPT.hidden of one token after the
cached ones, its linear layers on a faster kernel at small batch on a CPU (step_linear).
StaticDecoder's step is GPT.hidden at a position tensor, for torch.compile: the full-length cache
is written there and attention covers all slots under a mask, so one graph (on a GPU, one CUDA
graph) serves every step. `run` drives a decoder; `generate` is GPT.generate: eager, or compiled
with the decoder cached on the model (DecoderCache) so that later calls of the same shape do not
compile again; on a CPU its small-batch linear layers are inductor's own kernels
(linears_as_reductions), which stream the weights faster than MKL.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

Prefill = Callable[[torch.Tensor], torch.Tensor]  # prompt (B, P) -> last logits (B, V)
Step = Callable[[torch.Tensor, int], torch.Tensor]  # (token (B, 1), its position) -> logits (B, V)
Choose = Callable[[torch.Tensor], torch.Tensor]  # logits (B, V) -> next tokens (B, 1)
Linear = Callable[[nn.Linear, torch.Tensor], torch.Tensor]  # (layer, x) -> layer(x)

# generate(compile=True) rounds its cache length up to a multiple of this: fewer shapes to compile
CACHE_BUCKET = 64
GEMV_ROWS = 4  # compiled on a CPU, linears over at most this many rows: linears_as_reductions
ONEDNN_WEIGHTS = 2**18  # eager on a CPU: layers with this many weights (1 MB float32) use oneDNN


class KVCache(nn.Module):
    """Preallocated keys and values of one attention layer, (B, n_kv_head, max_len, head_dim)
    buffers (a module: a StaticDecoder's compiled graphs see them as static)."""

    def __init__(self, batch: int, n_kv_head: int, max_len: int, head_dim: int, device, dtype):
        super().__init__()
        shape = (batch, n_kv_head, max_len, head_dim)
        self.register_buffer("k", torch.zeros(shape, device=device, dtype=dtype), persistent=False)
        self.register_buffer("v", torch.zeros(shape, device=device, dtype=dtype), persistent=False)
        positions = torch.arange(max_len, device=device)
        self.register_buffer("positions", positions, persistent=False)

    def update(
        self, k: torch.Tensor, v: torch.Tensor, pos: int | torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Write a chunk's keys and values k, v (B, n_kv_head, T, head_dim) at positions pos..;
        returns the keys and values its queries attend to and their mask (None: causal in the chunk).

        An int pos: the filled part 0..pos+T-1; after cached tokens query i sees keys <= pos + i. A
        1-element position tensor (one token, fixed shapes for torch.compile): every slot, masked to
        the positions <= pos."""
        if not isinstance(pos, int):
            self.k.index_copy_(2, pos, k)
            self.v.index_copy_(2, pos, v)
            return self.k, self.v, (self.positions <= pos).view(1, 1, 1, -1)
        T = k.shape[2]
        end = pos + T
        self.k[:, :, pos:end] = k
        self.v[:, :, pos:end] = v
        mask = None
        if T > 1 and pos > 0:
            mask = torch.ones(T, end, dtype=torch.bool, device=k.device).tril(diagonal=pos)
        return self.k[:, :, :end], self.v[:, :, :end], mask


def new_cache(model: nn.Module, batch: int, max_len: int) -> nn.ModuleList:
    """One KVCache per layer of `model` (a GPT), in its weights' device and dtype (GPT.hidden's
    `cache`)."""
    cfg, p = model.config, model.tok_emb.weight
    return nn.ModuleList(
        KVCache(batch, cfg.n_kv_head, max_len, cfg.head_dim, p.device, p.dtype)
        for _ in model.blocks
    )


class StaticDecoder(nn.Module):
    """One decode step of a GPT with fixed shapes, for torch.compile and CUDA graphs: GPT.hidden of
    one token at a 1-element position tensor, its KV caches (submodules: their buffers are static
    in compiled graphs) written there with index_copy_, attention over all `max_len` slots masked
    to the positions <= pos (KVCache.update)."""

    def __init__(self, model: nn.Module, batch: int, max_len: int):
        super().__init__()
        self.model = model
        self.caches = new_cache(model, batch, max_len)

    def prefill(self, idx: torch.Tensor) -> torch.Tensor:
        return self.model.head(self.model.hidden(idx, self.caches, 0)[:, -1])

    def forward(self, tok: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """tok (B, 1) at position pos (1,) -> logits (B, V)."""
        return self.model.head(self.model.hidden(tok, self.caches, pos))[:, 0]


def eager_decoder(
    model: nn.Module, batch: int, max_len: int, linear: Linear | None = None
) -> tuple[Prefill, Step]:
    """The model's own KV-cache path, with a cache allocated once (reused by every call): the
    prefill is GPT.hidden with the cache, the step GPT.hidden and GPT.head of one token with
    their linear layers on step_linear's kernels (or `linear`'s)."""
    cache = new_cache(model, batch, max_len)
    p = model.tok_emb.weight
    lin = linear or step_linear(p.device, p.dtype, batch)

    def prefill(idx: torch.Tensor) -> torch.Tensor:
        return model.head(model.hidden(idx, cache, 0)[:, -1])

    def step(tok: torch.Tensor, pos: int) -> torch.Tensor:
        return model.head(model.hidden(tok, cache, pos, lin)[:, 0], lin)

    return prefill, step


def step_linear(device: torch.device, dtype: torch.dtype, rows: int) -> Linear:
    """How an eager decode step of `rows` sequences computes its linear layers: on a CPU in float32,
    at most GEMV_ROWS rows, a layer of at least ONEDNN_WEIGHTS weights runs on oneDNN's linear (the
    kernel inductor's CPU code calls); every other layer computes itself (MKL's GEMM on a CPU).

    oneDNN streams large weight matrices from memory faster than MKL's small-batch GEMM but costs
    more per call, so small layers stay on MKL (measured: benchmarks/README.md, "step_linear"). Its
    sums round differently from the GEMM's, about 1e-6 relative."""
    onednn = getattr(torch.ops.mkldnn, "_linear_pointwise", None)
    fast = onednn is not None and torch.backends.mkldnn.is_available()
    if not (fast and device.type == "cpu" and dtype == torch.float32 and rows <= GEMV_ROWS):
        return layer_linear

    def linear(layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        if layer.weight.numel() < ONEDNN_WEIGHTS:
            return layer(x)
        return onednn(x, layer.weight, layer.bias, "none", [], "")

    return linear


def layer_linear(layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """The layer computing itself: the model's own kernel."""
    return layer(x)


def static_decoder(
    model: nn.Module,
    batch: int,
    max_len: int,
    backend: str | None = None,
    fullgraph: bool = True,
    gemv: bool = False,
) -> tuple[Prefill, Step]:
    """StaticDecoder as it is (backend None), or compiled by torch.compile with `backend`
    ("inductor": see compile_kwargs); fullgraph: as one graph, else graph breaks are allowed (norms
    that read a tensor as a Python number, TaperNorm's gate, need them). gemv: on a CPU, inductor
    computes small-batch linear layers itself (linears_as_reductions). backend="eager" only traces,
    the tests' quick check of the graph capture."""
    decoder = StaticDecoder(model, batch, max_len)
    device = model.tok_emb.weight.device
    run, options = decoder, {}
    if backend is not None:
        options = compile_kwargs(device, backend)
        if gemv and backend == "inductor" and device.type == "cpu":
            backend, options = _gemv_inductor(options["options"]), {}
        run = torch.compile(decoder, backend=backend, fullgraph=fullgraph, **options)
    cuda_graphs = options.get("mode") == "reduce-overhead"
    positions = [torch.tensor([i], device=device) for i in range(max_len)]  # one tensor per step

    def step(tok: torch.Tensor, pos: int) -> torch.Tensor:
        if cuda_graphs:
            torch.compiler.cudagraph_mark_step_begin()  # each step overwrites the last one's outputs
        return run(tok, positions[pos])

    return decoder.prefill, step


def compile_kwargs(device: torch.device, backend: str) -> dict:
    """GPU: CUDA graphs (mode "reduce-overhead"). CPU: inductor's C++ wrapper, which calls the step's
    kernels from C++ instead of Python, for a longer compile (measured: benchmarks/README.md)."""
    if backend != "inductor":
        return {}
    if device.type == "cuda":
        return {"mode": "reduce-overhead"}
    return {"options": {"cpp_wrapper": True}}


def compiled_decoder(
    model: nn.Module, batch: int, max_len: int, fullgraph: bool = True, gemv: bool = False
) -> tuple[Prefill, Step]:
    """The compiled decoder: StaticDecoder under torch.compile (inductor)."""
    return static_decoder(model, batch, max_len, "inductor", fullgraph, gemv)


def linears_as_reductions(gm: torch.fx.GraphModule, max_rows: int = GEMV_ROWS) -> int:
    """Rewrite, in a graph dynamo captured, each F.linear over at most `max_rows` rows as
    (x[..., None, :] * W).sum(-1) (+ b); returns how many. Inductor compiles that into one fused
    reduction over threads, which at a few rows streams the weights faster than MKL's GEMM; at more
    rows (GEMV_ROWS) MKL is faster (measured: benchmarks/README.md). It sums in another order than
    MKL: float rounding differs."""
    graph, count = gm.graph, 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not torch._C._nn.linear:
            continue
        x = node.args[0].meta.get("example_value")
        if x is None or x.numel() > max_rows * x.shape[-1]:
            continue
        x, weight, *rest = node.args
        bias = rest[0] if rest else node.kwargs.get("bias")
        with graph.inserting_before(node):
            product = graph.call_function(
                torch.mul, (graph.call_method("unsqueeze", (x, -2)), weight)
            )
            out = graph.call_method("sum", (product, -1))
            if bias is not None:
                out = graph.call_function(torch.add, (out, bias))
        node.replace_all_uses_with(out)
        graph.erase_node(node)
        count += 1
    gm.recompile()
    return count


def _gemv_inductor(options: dict) -> Callable:
    """A torch.compile backend: linears_as_reductions, then inductor with `options`."""
    from torch._inductor.compile_fx import compile_fx

    def backend(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        linears_as_reductions(gm)
        return compile_fx(gm, example_inputs, config_patches=options)

    return backend


# ---- choosing tokens and running a decoder ------------------------------------------------------------


def sample(
    logits: torch.Tensor,
    temperature: float = 0.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Next tokens (B, 1) from logits (B, V): the argmax at temperature 0, else a draw from
    softmax(logits / temperature), restricted to the top_k largest logits when top_k is given."""
    if temperature == 0.0:
        return logits.argmax(-1, keepdim=True)
    logits = logits.float() / temperature
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.shape[-1])).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(F.softmax(logits, -1), 1, generator=generator)


def run(
    prefill: Prefill,
    step: Step,
    prompt: torch.Tensor,
    new_tokens: int,
    choose: Choose = sample,
    keep_logits: bool = False,
    stamp: Callable[[], object] | None = None,
) -> tuple[torch.Tensor, list[torch.Tensor], list]:
    """Decode `new_tokens` (>= 1) tokens after `prompt` (B, P): the prefill picks the first, then
    new_tokens - 1 steps each feed the last one and pick the next (`choose`; default greedy).

    Returns the tokens (B, P + new_tokens); with keep_logits the logits that chose each new token
    (copies: a CUDA-graph step overwrites its output), else []; with `stamp` its values before the
    prefill, after it and after the last step, else [].
    """
    B, P = prompt.shape
    out = torch.empty(B, P + new_tokens, dtype=torch.long, device=prompt.device)
    out[:, :P] = prompt
    kept, stamps = [], []
    mark = (lambda: stamps.append(stamp())) if stamp is not None else (lambda: None)
    mark()
    logits = prefill(prompt)
    tok = choose(logits)  # (B, 1), its own tensor: the same strides every step
    out[:, P] = tok[:, 0]
    mark()
    for i in range(1, new_tokens):
        if keep_logits:
            kept.append(logits.clone())
        logits = step(tok, P + i - 1)
        tok = choose(logits)
        out[:, P + i] = tok[:, 0]
    mark()
    if keep_logits:
        kept.append(logits.clone())
    return out, kept, stamps


# ---- GPT.generate ---------------------------------------------------------------------------------


def generate(
    model: nn.Module,
    idx: torch.Tensor,
    max_new_tokens: int,
    temperature: float = 0.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
    return_logits: bool = False,
    compile: bool = False,
):
    """GPT.generate of `model` (see there)."""
    B, T = idx.shape
    if T < 1 or max_new_tokens < 0:
        raise ValueError(
            f"generate needs a prompt and max_new_tokens >= 0, got {T}, {max_new_tokens}"
        )
    if temperature < 0 or (top_k is not None and top_k < 1):
        raise ValueError(f"generate needs temperature >= 0, top_k >= 1; got {temperature}, {top_k}")
    fed = T + max_new_tokens - 1  # positions fed: the prompt, then every new token but the last
    if fed > model.config.block_size:
        raise ValueError(f"sequence of {fed} tokens exceeds block_size {model.config.block_size}")
    if max_new_tokens == 0:
        logits = idx.new_empty(B, 0, model.config.vocab_size, dtype=model.tok_emb.weight.dtype)
        return (idx.clone(), logits) if return_logits else idx.clone()
    choose = functools.partial(sample, temperature=temperature, top_k=top_k, generator=generator)
    with torch.inference_mode():
        if compile:
            decoder = DecoderCache.of(model).get(model, B, fed)
        else:
            decoder = eager_decoder(model, B, fed)
        out, kept, _ = run(*decoder, idx, max_new_tokens, choose, keep_logits=return_logits)
    out = out.clone()  # outside inference mode: ordinary tensors the caller may change in place
    return (out, torch.stack(kept, dim=1)) if return_logits else out


class DecoderCache:
    """The compiled decoders of one model, by (batch, cache length, dtype, device).

    Valid for one set of modules and weight tensors: when any is replaced (a new Parameter, `.to()`,
    load_state_dict(assign=True), a swapped submodule) every decoder is dropped and rebuilt on demand.
    In-place weight updates need nothing: compiled steps read the weights at each call. Lives in the
    model's __dict__ but is neither copied with it (deepcopy, pickle: a copy starts empty) nor saved.
    """

    def __init__(self):
        self.signature: tuple = ()
        self.decoders: dict[tuple, tuple[Prefill, Step]] = {}

    def __deepcopy__(self, memo) -> DecoderCache:
        return DecoderCache()

    def __reduce__(self):
        return DecoderCache, ()

    @staticmethod
    def of(model: nn.Module) -> DecoderCache:
        cache = model.__dict__.get("_decoder_cache")
        if cache is None:
            cache = model.__dict__["_decoder_cache"] = DecoderCache()
        return cache

    def get(self, model: nn.Module, batch: int, length: int) -> tuple[Prefill, Step]:
        """A compiled decoder for `batch` sequences of up to `length` positions (rounded up to a
        multiple of CACHE_BUCKET, at most block_size)."""
        signature = _signature(model)
        if signature != self.signature:
            self.decoders.clear()
            self.signature = signature
        length = min(-(-length // CACHE_BUCKET) * CACHE_BUCKET, model.config.block_size)
        weight = model.tok_emb.weight
        key = (batch, length, weight.dtype, weight.device)
        if key not in self.decoders:
            self.decoders[key] = compiled_decoder(model, batch, length, fullgraph=False, gemv=True)
        return self.decoders[key]


def _signature(model: nn.Module) -> tuple:
    """Identity of every module and tensor of `model`, and where each tensor's data lives."""
    tensors = [*model.parameters(), *model.buffers()]
    return (
        tuple(id(m) for m in model.modules()),
        tuple((id(t), t.data_ptr(), t.dtype, t.device, t.shape) for t in tensors),
    )

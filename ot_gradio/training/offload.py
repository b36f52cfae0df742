"""Layer offloading to RAM: a part's `offload_fraction` and `activation_offloading` (OneTrainer's
`layer_offload_fraction` and activation offloading, done our own, simpler way).

Offloading. The part's repeated blocks are found (the transformer block lists of the Flux,
Chroma, SD 3, Z-Image, Sana, PixArt and Qwen-Image transformers, a UNet's down and up blocks, a
text encoder's layers), in the order they run. The *frozen* weights (parameters that do not
train, and buffers) of the last ceil(fraction x blocks) blocks live in RAM between uses (pinned
on CUDA); the trained ones (a LoRA's) stay on the train device. Each offloaded block's forward
is wrapped: it moves the frozen weights to the train device (non-blocking from pinned memory when
`async_offloading` is on and the device is CUDA), runs the block and points the weights back at
their RAM copies (frozen weights do not change, so nothing is copied back). The wrapped forward
always runs under non-reentrant activation checkpointing while gradients are on: otherwise
autograd would keep the device copies alive until the backward pass and nothing would be saved;
with it the backward pass recomputes the block, which moves the weights in again.

Activation offloading: the part's forward runs inside `torch.autograd.graph.save_on_cpu`, so the
tensors autograd saves for the backward pass are kept in RAM (pinned on CUDA).

On a CPU train device there is nothing to move (the layers and activations are in RAM already):
`install_offloading` says so and installs nothing. There is no prefetching of the next block on
a side stream (OneTrainer's conductor does that); copies are queued on the current stream.

With `compile` on, a denoiser with offloading is compiled block by block, as OneTrainer compiles
it (`compile_blocks`): torch.compile cannot follow weights that change device inside the forward
(the saved weights of a compiled graph do not survive the move back to RAM under checkpointing),
so each block that stays on the device is compiled on its own and the offloaded blocks, whose
step is bound by the copies anyway, run uncompiled; saved activations kept in RAM work around
compiled blocks as around plain ones.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from ..models.common import base_module
from .weak_hooks import weak_hook

BLOCK_LISTS = ("transformer_blocks", "single_transformer_blocks", "joint_blocks", "blocks", "layers", "block",
               "down_blocks", "up_blocks", "noise_refiner", "context_refiner", "h", "layer")

Mover = Callable[[torch.Tensor, torch.device], torch.Tensor]


def find_blocks(module: nn.Module) -> list[nn.Module]:
    """The part's repeated blocks in running order: the items of every ModuleList named like a
    block list (BLOCK_LISTS) that is not inside another such list."""
    module = base_module(module)
    blocks: list[nn.Module] = []
    inside: list[str] = []
    for name, child in module.named_modules():
        if any(name.startswith(prefix + ".") for prefix in inside):
            continue
        if isinstance(child, nn.ModuleList) and name.rsplit(".", 1)[-1] in BLOCK_LISTS and len(child) > 0:
            inside.append(name)
            blocks.extend(child)
    return blocks


def _plain(t: torch.Tensor) -> bool:
    """Plain tensors only (FLOAT_8's float8 weights and their scales are plain): bitsandbytes'
    parameter types (INT_8, NFLOAT_4) carry quantization state that swapping `.data` would lose,
    so they stay on the device (the log counts them)."""
    return type(t) in (torch.Tensor, nn.Parameter)


def _input_device(args: tuple, kwargs: dict) -> torch.device | None:
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            return value.device
    return None


class OffloadedBlock:
    """One block's tensors: their RAM copies, moved in before the forward and dropped after.

    A frozen tensor's device copy is a new object put in its module's table for the call (a
    frozen parameter as a new `nn.Parameter` that does not train), and the RAM one goes back
    after it. Autograd saves a frozen weight as the object itself (a norm's weight in a product),
    so the backward pass's recomputation must leave it on the device until the block's backward
    has used it: a fresh object does, and is freed with the saved tensors; swapping `.data` of the
    one parameter would move a saved weight back to RAM under the backward (on a GPU,
    torch.utils.checkpoint refuses it: "Recomputed values ... have different metadata").

    With `trained` (a fine-tune with the fused back pass) its trained weights are offloaded too,
    and keep their identity (the optimizer holds them): their `.data` moves. In the backward
    pass's recomputation they stay on the device until their gradient has been used by the
    optimizer's step inside the backward pass (`return_trained`, a hook after the step's), which
    copies the stepped weight back into its RAM copy. A trained weight left on the device (no
    gradient reached it) is copied back at its block's next forward instead."""

    def __init__(self, block: nn.Module, train_device: torch.device, offload_device: torch.device,
                 mover: Mover, pin: bool, trained: bool = False) -> None:
        self.block, self.train_device, self.mover = block, train_device, mover
        # [table, name, the tensor the table holds between calls, its RAM copy, the device copy in the table during a call]
        self.entries: list[list] = []
        self.trained: dict[int, list] = {}  # id of a trained weight -> its entry
        self.dirty: set[int] = set()  # trained weights on the device whose values may differ from RAM
        self.skipped = 0
        self.nbytes = 0
        self.loads = 0
        self._forwarding = False
        for module in block.modules():
            for table, is_parameter in ((module._parameters, True), (module._buffers, False)):
                for name, t in list(table.items()):
                    if t is None or (is_parameter and t.requires_grad and not trained):
                        continue
                    if not _plain(t):
                        self.skipped += 1
                        continue
                    copy = mover(t.detach(), offload_device)
                    if pin and copy.device.type == "cpu":
                        copy = copy.pin_memory()
                    self.entries.append([table, name, t, copy, None])
                    if is_parameter and t.requires_grad:
                        self.trained[id(t)] = self.entries[-1]
                    self.nbytes += t.numel() * t.element_size()
                    if isinstance(t, nn.Parameter):  # from now on it holds the RAM copy
                        t.data = copy
                    else:
                        table[name] = self.entries[-1][2] = copy
        self.forward = block.forward
        block.forward = self.run  # instance attribute: nn.Module.__call__ finds it

    @staticmethod
    def _live(entry: list) -> bool:
        """False while the table holds another tensor (the memory planner's meta probe swapped it)."""
        held = entry[0].get(entry[1])
        return held is entry[2] or (entry[4] is not None and held is entry[4])

    def load(self) -> None:
        self.loads += 1
        for entry in self.entries:
            table, name, tensor, copy, _ = entry
            if id(tensor) in self.dirty or not self._live(entry):  # a trained weight still on the device holds its newest values
                continue
            value = self.mover(copy, self.train_device)
            if id(tensor) in self.trained:
                tensor.data = value
            else:
                entry[4] = table[name] = nn.Parameter(value, requires_grad=False) if isinstance(tensor, nn.Parameter) else value

    def unload(self, keep_trained: bool = False) -> None:
        """Put the RAM copies back in the tables. `keep_trained` (the backward pass's
        recomputation): trained weights stay on the device for their gradient and step."""
        for entry in self.entries:
            key = id(entry[2])
            if not self._live(entry):
                continue
            if key in self.trained:
                if keep_trained and entry[2].requires_grad:
                    self.dirty.add(key)
                    continue
                if key in self.dirty:
                    self._copy_back(entry)
                entry[2].data = entry[3]
            else:
                entry[0][entry[1]], entry[4] = entry[2], None

    def _copy_back(self, entry: list) -> None:
        with torch.no_grad():
            entry[3].copy_(entry[2].data)
        self.dirty.discard(id(entry[2]))

    def return_trained(self, p: torch.Tensor) -> None:
        """After a trained weight's step in the backward pass: its new values to RAM, and the
        device copy dropped."""
        entry = self.trained.get(id(p))
        if entry is None or id(p) not in self.dirty or not self._live(entry):
            return
        self._copy_back(entry)
        entry[2].data = entry[3]

    def _call(self, *args: Any, **kwargs: Any) -> Any:
        if (not torch.is_grad_enabled() and self.train_device.type != "cpu"
                and _input_device(args, kwargs) == torch.device("cpu")):
            # its part waits in RAM (placement.py; a caption the text cache missed): the RAM copies
            # serve. Never with gradients on: a parked part is frozen, and a training forward or the
            # backward pass's recomputation must run on the weights it was saved with
            return self.forward(*args, **kwargs)
        self.load()
        try:
            return self.forward(*args, **kwargs)
        finally:
            # a call with gradients on that is not `run`'s own is the backward pass recomputing the block
            self.unload(keep_trained=torch.is_grad_enabled() and not self._forwarding)

    def run(self, *args: Any, **kwargs: Any) -> Any:
        if torch.is_grad_enabled():
            self._forwarding = True
            try:
                return checkpoint(self._call, *args, use_reentrant=False, **kwargs)
            finally:
                self._forwarding = False
        return self._call(*args, **kwargs)


class PartOffload:
    """What was installed on one part (for the log, the memory planner and tests)."""

    def __init__(self, part: str, n_blocks: int, blocks: list[OffloadedBlock], activations: bool, asked: int = 0) -> None:
        self.part, self.n_blocks, self.blocks, self.activations = part, n_blocks, blocks, activations
        self.asked = asked  # blocks the fraction named; those whose every weight trains are not offloaded

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self.blocks)

    def return_trained_after_steps(self) -> int:
        """Hooks that send each offloaded trained weight back to RAM after its step in the
        backward pass; call after the fused back pass's optimizer registered its own hooks
        (hooks run in the order they were registered). Returns how many weights got one."""
        count = 0
        for block in self.blocks:
            for entry in block.trained.values():
                entry[2].register_post_accumulate_grad_hook(weak_hook(block.return_trained))
                count += 1
        return count

    def describe(self) -> str:
        from .memory_probe import gb  # noqa: PLC0415

        skipped = sum(b.skipped for b in self.blocks)
        trained = any(b.trained for b in self.blocks)
        kind = "weights (trained ones too: each goes back to RAM after its step in the fused back pass)" if trained else "frozen weights"
        text = (f"{self.part}: {len(self.blocks)} of {self.n_blocks} blocks' {kind} ({gb(self.nbytes)}) kept in RAM, "
                f"moved in for each forward; these blocks run under activation checkpointing (non-reentrant)")
        if self.asked > len(self.blocks):
            text += (f"; {self.asked - len(self.blocks)} of the {self.asked} blocks the fraction names stay on the device: "
                     "every weight of them trains, and without the fused back pass layer offloading moves frozen weights only")
        if skipped:
            text += f"; {skipped} quantized tensors stay on the device"
        if self.activations:
            text += "; saved activations kept in RAM"
        return text


def offloads_trained_weights(config: Any) -> bool:
    """Trained weights are offloaded too when the fused back pass steps each one inside the
    backward pass (OneTrainer's condition): no gradient or step waits for a weight in RAM."""
    from ..config.optimizer import fused_back_pass_on  # noqa: PLC0415

    return fused_back_pass_on(config)


def default_mover(non_blocking: bool) -> Mover:
    def move(t: torch.Tensor, device: torch.device) -> torch.Tensor:
        return t.to(device, non_blocking=non_blocking and device.type == "cuda")

    return move


def _wrap_activations(module: nn.Module, pin: bool) -> None:
    forward = module.forward

    def run(*args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled() or _input_device(args, kwargs) == torch.device("meta"):
            # (the memory planner's probe runs on meta tensors, which cannot be copied to RAM: it
            # counts the saved activations on the device, an upper bound)
            context = nullcontext()
        else:
            context = torch.autograd.graph.save_on_cpu(pin_memory=pin)
        with context:
            return forward(*args, **kwargs)

    module.forward = run


def install_offloading(model: Any, config: Any, device: torch.device, *, mover: Mover | None = None,
                       offload_device: torch.device | None = None, force: bool = False) -> tuple[list[PartOffload], str | None]:
    """Install the parts' offloading (denoiser and text encoders). Returns what was installed and
    the message for the log and events (None when no part asks for it). `force` installs even
    with the train device on CPU (tests, with `mover` recording the moves)."""
    parts = [p for p in (model.denoiser, *model.text_encoder_names) if p in model.parts]
    asked = {p: getattr(config, p) for p in parts
             if getattr(config, p, None) is not None and (getattr(config, p).offload_fraction > 0 or getattr(config, p).activation_offloading)}
    if not asked:
        return [], None
    settings = ", ".join(f"{p}.offload_fraction {c.offload_fraction:g}, activation_offloading {c.activation_offloading}" for p, c in asked.items())
    if device.type == "cpu" and not force:
        return [], f"layer offloading ({settings}): train device is CPU: the layers are in RAM already, nothing to move"
    cuda = device.type == "cuda"
    is_async = bool(getattr(config, "async_offloading", True))
    mover = mover or default_mover(is_async and cuda)
    offload_device = offload_device or torch.device("cpu")
    done: list[PartOffload] = []
    trained = offloads_trained_weights(config)
    for part, part_config in asked.items():
        module = model.parts[part]
        blocks = find_blocks(module) if part_config.offload_fraction > 0 else []
        count = min(len(blocks), math.ceil(part_config.offload_fraction * len(blocks)))
        # without the fused back pass only frozen weights move: a block whose every weight trains stays on the device
        chosen = [b for b in blocks[len(blocks) - count:] if trained or any(not p.requires_grad for p in b.parameters())]
        offloaded = [OffloadedBlock(b, device, offload_device, mover, pin=cuda, trained=trained) for b in chosen]
        if part_config.activation_offloading:
            _wrap_activations(module, pin=cuda)
        done.append(PartOffload(part, len(blocks), offloaded, part_config.activation_offloading, asked=count))
    copies = "non-blocking from pinned memory" if cuda and is_async else "blocking"
    message = "layer offloading: " + "; ".join(d.describe() for d in done) + f" (copies {copies})"
    model.layer_offload = done
    return done, message


def compile_blocks(module: nn.Module, offload: PartOffload) -> str:
    """`compile` for a part with offloading installed: every block not offloaded compiled in place
    (`nn.Module.compile`, so its parameters and state-dict keys stay as they are); the offloaded
    blocks and the layers outside the block lists run as they are. Returns the line for the log."""
    offloaded = {id(b.block) for b in offload.blocks}
    blocks = find_blocks(module)
    compiled = [b for b in blocks if id(b) not in offloaded]
    for block in compiled:
        block.compile()
    text = f"compile: {len(compiled)} of {len(blocks)} {offload.part} blocks compiled one by one"
    if offloaded:
        text += (f"; the {len(offloaded)} offloaded blocks run uncompiled (their weights move to the device inside the "
                 "forward, which torch.compile cannot follow)")
    return text


def offloaded_bytes(model: Any, parked: Any = ()) -> int:
    """Bytes of frozen weights kept in RAM instead of on the train device (for the memory planner);
    `parked`: parts that wait in RAM whole while the steps run (placement.py), counted there."""
    return sum(d.nbytes for d in getattr(model, "layer_offload", []) or [] if d.part not in parked)


def offloaded_entries(module: nn.Module) -> list[tuple[OffloadedBlock, list]]:
    """The offloaded tensors of `module`'s blocks, as (block, entry): outside a block's forward
    each points at its RAM copy."""
    out = []
    for sub in module.modules():
        block = getattr(sub.__dict__.get("forward"), "__self__", None)
        if isinstance(block, OffloadedBlock):
            out += [(block, entry) for entry in block.entries if block._live(entry)]
    return out


__all__ = ["BLOCK_LISTS", "OffloadedBlock", "PartOffload", "compile_blocks", "find_blocks", "install_offloading", "offloaded_bytes",
           "offloaded_entries",
           "offloads_trained_weights"]

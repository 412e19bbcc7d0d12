"""myops.compile under torch.distributed (gloo, 2 CPU processes): DistributedDataParallel with and
without Dynamo's DDPOptimizer (whose bucket boundaries would cut a chain), and FSDP2 (fully_shard
per block). Each rank checks its rewrite counts, the gradients (the mean of eager PyTorch's on
each rank's shard) and its BatchNorm buffers (eager PyTorch's on its own shard)."""
import copy
import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn

WORLD = 2
pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="no gloo")


class Block(nn.Module):
    """A user's block (its own forward: FSDP2 compiles each fully_shard unit's frame)."""

    def __init__(self, *layers):
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class Net(nn.Module):
    # Sized so that the DDPOptimizer's first bucket (1 MiB of parameters, filled in reverse order:
    # head, then up2's BatchNorm) is full right after up2's BatchNorm: the boundary falls between
    # up2's conv and its normalisation.
    def __init__(self):
        super().__init__()
        self.up1 = Block(nn.ConvTranspose2d(8, 32, 4, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU())
        self.up2 = Block(nn.ConvTranspose2d(32, 227, 3, 2, 1, 1, bias=False), nn.BatchNorm2d(227), nn.ReLU())
        self.head = Block(nn.ConvTranspose2d(227, 128, 3, 1, 1), nn.GELU(), nn.GroupNorm(8, 128))

    def forward(self, x):
        return self.head(self.up2(self.up1(x)))


EXPECTED = {"conv_transpose2d_batch_norm_relu": 2, "conv_transpose2d_gelu_group_norm": 1}


def _eager_reference(model, shards, rank):
    """(mean of the gradients over the shards, the buffers after this rank's own shard)."""
    grads, buffers = None, None
    for r, shard in enumerate(shards):
        m = copy.deepcopy(model)
        m(shard).square().mean().backward()
        g = [p.grad for p in m.parameters()]
        grads = g if grads is None else [a + b for a, b in zip(grads, g)]
        if r == rank:
            buffers = [b.clone() for b in m.buffers()]
    return [g / len(shards) for g in grads], buffers


def _check(name, model, compiled, shards, rank, reference):
    import myops.compile as mc
    grads_ref, buffers_ref = reference
    compiled(shards[rank]).square().mean().backward()
    rewritten = {k: v for k, v in mc.stats().items() if v}
    assert rewritten == EXPECTED, f"{name}, rank {rank}: rewrote {rewritten}"
    for i, (p, g) in enumerate(zip(model.parameters(), grads_ref)):
        grad = p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad
        torch.testing.assert_close(grad, g, atol=1e-5 * g.abs().max().item() + 1e-7, rtol=1e-4,
                                   msg=lambda m: f"{name}, rank {rank}, parameter {i}: {m}")
    for i, (b, ref) in enumerate(zip(model.buffers(), buffers_ref)):
        torch.testing.assert_close(b, ref, atol=1e-6, rtol=1e-5, msg=lambda m: f"{name}, rank {rank}, buffer {i}: {m}")


def _worker(rank, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        import myops.compile as mc
        from torch.distributed.fsdp import fully_shard
        torch.manual_seed(0)
        x = torch.randn(2 * WORLD, 8, 3, 3)
        shards = list(x.chunk(WORLD))
        initial = Net()
        reference = _eager_reference(initial, shards, rank)
        mc.enable(devices=None)
        for name in ("ddp", "ddp_no_optimizer", "fsdp2"):
            torch._dynamo.reset()
            torch._dynamo.config.optimize_ddp = name == "ddp"
            mc.reset_stats()
            model = copy.deepcopy(initial)
            if name == "fsdp2":
                for block in (model.up1, model.up2, model.head):
                    fully_shard(block)
                wrapped = fully_shard(model)
            else:
                wrapped = nn.parallel.DistributedDataParallel(model)
            _check(name, model, torch.compile(wrapped), shards, rank, reference)
    finally:
        dist.destroy_process_group()
    _exit_passed()


def _exit_passed():
    """Ends a worker whose checks passed without the interpreter's teardown: that teardown aborted
    now and then on the CPU machines ("terminate called without an active exception", both ranks'
    checks done, the process group destroyed), which mp.spawn reports as the test failing."""
    import sys
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ddp_and_fsdp2_keep_the_rewrites_and_the_gradients():
    mp.spawn(_worker, args=(_free_port(),), nprocs=WORLD, join=True)


def _sync_batch_norm_worker(rank, port):
    # nn.SyncBatchNorm in the family (the drop-in module over converted layers): each rank's output
    # and input gradient are its slice of one process's BatchNorm over the whole batch, the
    # parameter gradients summed over the ranks are that process's, the running buffers its own;
    # the ranks hold 3 and 2 samples (statistics weighted by count). Every collective runs before
    # any check, so that a failed check on one rank cannot leave the other inside one.
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        import myops
        torch.manual_seed(0)
        x = torch.randn(5, 6, 4, 4)
        g = torch.randn(5, 8, 7, 7)
        rows = slice(0, 3) if rank == 0 else slice(3, 5)
        layers = nn.Sequential(nn.ConvTranspose2d(6, 8, 3, 2, 1), nn.BatchNorm2d(8), nn.ReLU())
        with torch.no_grad():
            layers[1].weight.uniform_(0.5, 1.5)
            layers[1].bias.uniform_(-0.5, 0.5)
        reference = copy.deepcopy(layers)
        synced = nn.SyncBatchNorm.convert_sync_batchnorm(copy.deepcopy(layers))
        block = myops.nn.ConvTranspose2dNormAct.from_modules(*synced)
        checks = []
        for step in range(2):  # the second step normalises with the same rule, buffers moved twice
            x_ref = x.clone().requires_grad_()
            y_ref = reference(x_ref)
            (y_ref * g).sum().backward()
            x_own = x[rows].clone().requires_grad_()
            y = block(x_own)
            (y * g[rows]).sum().backward()
            checks += [(f"output, step {step}", y, y_ref[rows], 1e-5), (f"input grad, step {step}", x_own.grad,
                                                                          x_ref.grad[rows], 1e-5)]
        for i, (p, p_ref) in enumerate(zip(block.parameters(), reference.parameters())):
            grad = p.grad.clone()
            dist.all_reduce(grad)
            checks.append((f"parameter {i} grad", grad, p_ref.grad, 1e-4))
        checks += [(f"buffer {i}", b, b_ref, 1e-6) for i, (b, b_ref) in enumerate(zip(block.buffers(),
                                                                                     reference.buffers()))]
    finally:
        dist.destroy_process_group()
    for what, got, want, atol in checks:
        torch.testing.assert_close(got, want, atol=atol * max(1.0, want.abs().max().item()), rtol=1e-4,
                                   msg=lambda m: f"rank {rank}, {what}: {m}")
    _exit_passed()


def test_sync_batch_norm_in_the_family():
    mp.spawn(_sync_batch_norm_worker, args=(_free_port(),), nprocs=WORLD, join=True)

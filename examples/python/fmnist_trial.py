#!/usr/bin/env python3
"""A PyTorch trial on Fashion-MNIST, run by dial-worker as a study's
``trial.command`` (examples/python/fmnist-asha.yaml, fmnist-pbt.yaml).

It uses the Python SDK's trial side (docs/trial-protocol.md):

* ``dial.trial`` reads the hyperparameters, the thread budget and the seed,
  and reports each step;
* ``dial.pytorch.Checkpointer`` saves the model, the optimiser and every
  RNG state atomically with each report, restores them when the attempt
  resumes (a worker died, ASHA promoted a paused trial) and loads the donor's
  weights on a PBT ``EXPLOIT``.

The model is a small MLP with dropout, trained with SGD + momentum on a
fixed subset of the images (``--train-size`` training images, the first
``--val-size`` test images for validation), so a trial takes seconds on a
CPU. One step is one pass over that subset in mini-batches. The batch order
of a step is a function of the seed and the step alone, and the dropout
masks come from torch's RNG, which the checkpoint holds: a resumed trial
reports exactly the losses an uninterrupted one would have.

Hyperparameters (``trial.params()``, with defaults): ``lr`` (0.05),
``momentum`` (0.9), ``hidden`` (64 units; fixed for PBT, which cannot change
the architecture of running weights) and ``dropout`` (0.2).

Each step reports ``val_loss``, ``val_accuracy``, ``train_loss`` and
``restored_step``: the step of the checkpoint this attempt restored or a PBT
exploit last loaded (-1 if none), which shows resumes in the metric history.

Run it by hand (reports go to stderr, every decision is CONTINUE)::

    DIAL_TRIAL_PARAMS='{"lr": 0.1}' python3 examples/python/fmnist_trial.py --steps 3

The interpreter needs the ``dial`` package (``pip install ./python``) and
torch.
"""
import argparse
import gzip
import os
import sys

import numpy as np
import torch
from torch import nn

from dial import trial
from dial.pytorch import Checkpointer

DEFAULT_DATA_DIR = "/usr/share/datasets/fashion-mnist"


def read_idx(data_dir, name, count):
    """The first `count` items of an IDX file (`name`, or `name`.gz) as a
    uint8 array: only those bytes are read and decompressed."""
    path = os.path.join(data_dir, name)
    opener = open
    if not os.path.exists(path) and os.path.exists(path + ".gz"):
        path, opener = path + ".gz", gzip.open
    with opener(path, "rb") as f:
        header = f.read(4)
        dims = header[3]
        shape = [int.from_bytes(f.read(4), "big") for _ in range(dims)]
        if count > shape[0]:
            raise ValueError(f"{path} holds {shape[0]} items, not {count}")
        size = count * int(np.prod(shape[1:], dtype=np.int64))
        data = np.frombuffer(f.read(size), dtype=np.uint8)
    return data.reshape([count] + shape[1:])


def load_data(data_dir, train_size, val_size):
    """(train_x, train_y, val_x, val_y) as tensors; images flattened to
    784 floats in [0, 1]."""
    def images(name, n):
        return torch.from_numpy(
            read_idx(data_dir, name, n).reshape(n, -1).astype(np.float32)
            / 255.0)

    def labels(name, n):
        return torch.from_numpy(read_idx(data_dir, name, n).astype(np.int64))

    return (images("train-images-idx3-ubyte", train_size),
            labels("train-labels-idx1-ubyte", train_size),
            images("t10k-images-idx3-ubyte", val_size),
            labels("t10k-labels-idx1-ubyte", val_size))


def make_model(hidden, dropout):
    return nn.Sequential(nn.Linear(784, hidden), nn.ReLU(),
                         nn.Dropout(dropout), nn.Linear(hidden, 10))


def batch_order(seed, step, n):
    """The permutation of the training set for `step`: the same in every
    attempt, so nothing about the data order needs to be checkpointed."""
    return torch.from_numpy(
        np.random.default_rng([seed, step]).permutation(n))


def train_step(model, optimizer, x, y, order, batch_size):
    """One pass over the training subset; returns the mean loss."""
    model.train()
    total = 0.0
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
        loss.backward()
        optimizer.step()
        total += loss.item() * len(idx)
    return total / len(order)


@torch.no_grad()
def evaluate(model, x, y):
    model.eval()
    logits = model(x)
    loss = nn.functional.cross_entropy(logits, y).item()
    accuracy = (logits.argmax(dim=1) == y).float().mean().item()
    return loss, accuracy


def set_hyperparameters(optimizer, params):
    """Applies lr and momentum from `params` (PBT changes them)."""
    for group in optimizer.param_groups:
        group["lr"] = float(params.get("lr", 0.05))
        group["momentum"] = float(params.get("momentum", 0.9))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=10,
                        help="steps (passes over the training subset)")
    parser.add_argument("--checkpoint-every", type=int, default=1,
                        help="save and report a checkpoint every k steps")
    parser.add_argument("--train-size", type=int, default=6000)
    parser.add_argument("--val-size", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--data-dir", default=os.environ.get(
        "DIAL_FMNIST_DIR", DEFAULT_DATA_DIR),
        help="the IDX files, gzipped or not ($DIAL_FMNIST_DIR)")
    args = parser.parse_args()

    # The worker's thread budget (DIAL_CPU_THREADS); a re-evaluation run
    # (DIAL_SEED) gets its own seed, every other trial the same one.
    torch.set_num_threads(trial.threads())
    seed = trial.seed() if trial.seed() is not None else 0
    torch.manual_seed(seed)

    params = trial.params()
    train_x, train_y, val_x, val_y = load_data(
        args.data_dir, args.train_size, args.val_size)
    model = make_model(int(params.get("hidden", 64)),
                       float(params.get("dropout", 0.2)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    set_hyperparameters(optimizer, params)

    # Restores model, optimiser and RNG states when this attempt resumes;
    # 0 on a fresh start.
    ckpt = Checkpointer(model, optimizer, keep=2)
    step = ckpt.restore()
    if ckpt.restored_step is not None:
        print(f"resumed from {ckpt.restored_from} at step {step}",
              file=sys.stderr, flush=True)
        # After a PBT exploit the trial's params are the new ones.
        set_hyperparameters(optimizer, trial.params())

    while step < args.steps:
        step += 1
        order = batch_order(seed, step, len(train_x))
        train_loss = train_step(model, optimizer, train_x, train_y, order,
                                args.batch_size)
        val_loss, val_accuracy = evaluate(model, val_x, val_y)
        restored = ckpt.restored_step if ckpt.restored_step is not None \
            else -1
        save = step % args.checkpoint_every == 0 or step == args.steps
        decision = ckpt.report(
            step, {"val_loss": val_loss, "val_accuracy": val_accuracy,
                   "train_loss": train_loss, "restored_step": restored},
            save=save)
        if decision.should_exit:  # STOP, or PAUSE at an ASHA rung
            break
        if decision.exploit:
            # The Checkpointer loaded the donor's weights and optimiser
            # state; go on from here with the new hyperparameters.
            set_hyperparameters(optimizer, trial.params())
            print(f"step {step}: loaded {decision.checkpoint} (step "
                  f"{ckpt.restored_step}), now {trial.params()}",
                  file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()

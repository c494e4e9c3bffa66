"""A PyTorch trial run through ``dial.trial``: an MLP on a Fashion-MNIST
subset whose training labels are 30% noise. Fast learning rates fit the
noise and their validation loss climbs back late; slow ones (low rates,
long warm-ups) start behind and end ahead, so the curves cross.

Params (``DIAL_TRIAL_PARAMS``): lr, momentum, hidden, warmup_steps,
weight_decay. Knobs (environment): NOISY_STEPS (400), NOISY_EVAL_EVERY
(20), NOISY_SEED (0), DIAL_FASHION_MNIST (data directory).
"""
import gzip
import math
import os
import sys

import numpy as np
import torch

from dial import trial

DATA = os.environ.get("DIAL_FASHION_MNIST",
                      "/usr/share/datasets/fashion-mnist")
TRAIN, VAL, NOISE = 12000, 2000, 0.3


def load(kind):
    with gzip.open(os.path.join(DATA, f"{kind}-images-idx3-ubyte.gz")) as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784)
    with gzip.open(os.path.join(DATA, f"{kind}-labels-idx1-ubyte.gz")) as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)
    return x, y


def main():
    p = trial.params()
    steps = int(os.environ.get("NOISY_STEPS", "400"))
    every = int(os.environ.get("NOISY_EVAL_EVERY", "20"))
    seed = int(os.environ.get("NOISY_SEED", "0"))
    torch.set_num_threads(trial.threads() or 1)
    x, y = load("train")
    # The same subset, noise and validation split for every configuration.
    rng = np.random.default_rng(1234)
    order = rng.permutation(len(y))
    tr, va = order[:TRAIN], order[TRAIN:TRAIN + VAL]
    noisy = y[tr].copy()
    flip = rng.random(TRAIN) < NOISE
    noisy[flip] = rng.integers(0, 10, int(flip.sum()))
    to_x = lambda idx: torch.from_numpy((x[idx] / 255.0 - 0.286) / 0.353).float()
    xt, yt = to_x(tr), torch.from_numpy(noisy.astype(np.int64))
    xv, yv = to_x(va), torch.from_numpy(y[va].astype(np.int64))

    torch.manual_seed(seed)
    hidden = int(p["hidden"])
    net = torch.nn.Sequential(torch.nn.Linear(784, hidden), torch.nn.ReLU(),
                              torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
                              torch.nn.Linear(hidden, 10))
    opt = torch.optim.SGD(net.parameters(), lr=float(p["lr"]),
                          momentum=float(p["momentum"]),
                          weight_decay=float(p["weight_decay"]))
    warmup = int(p["warmup_steps"])
    gen = torch.Generator().manual_seed(seed)
    print("noisy_trial: starting at step 0", file=sys.stderr, flush=True)
    for step in range(1, steps + 1):
        scale = min(1.0, step / warmup) if warmup > 0 else 1.0
        for g in opt.param_groups:
            g["lr"] = float(p["lr"]) * scale
        batch = torch.randint(0, TRAIN, (64,), generator=gen)
        loss = torch.nn.functional.cross_entropy(net(xt[batch]), yt[batch])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % every:
            continue
        with torch.no_grad():
            out = net(xv)
            val_loss = torch.nn.functional.cross_entropy(out, yv).item()
            acc = (out.argmax(1) == yv).float().mean().item()
        if not math.isfinite(val_loss):
            val_loss = float("inf")
        decision = trial.report(step, {"val_loss": val_loss,
                                       "val_accuracy": acc,
                                       "train_loss": loss.item()})
        if decision.should_exit:
            break


if __name__ == "__main__":
    main()

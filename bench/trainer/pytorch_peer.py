"""Peer for dial-train: an idiomatic PyTorch (Debian python3-torch 1.13)
training loop for the same MLP or CNN on Fashion-MNIST, with TensorDataset +
DataLoader. Prints training samples/s (the step loop only, like dial-train's
samples_per_s) and the final test accuracy.

usage: /usr/bin/python3 pytorch_peer.py --model mlp|cnn --steps N --threads T
"""
import argparse
import gzip
import time

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def load(path, offset, shape):
    with gzip.open(path, "rb") as f:
        return np.frombuffer(f.read(), dtype=np.uint8, offset=offset).reshape(shape)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=1200)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--units", type=int, default=256)
    p.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    d = a.data_dir
    x = torch.from_numpy(load(f"{d}/train-images-idx3-ubyte.gz", 16, (-1, 784)).copy()).float()
    y = torch.from_numpy(load(f"{d}/train-labels-idx1-ubyte.gz", 8, (-1,)).copy()).long()
    xt = torch.from_numpy(load(f"{d}/t10k-images-idx3-ubyte.gz", 16, (-1, 784)).copy()).float()
    yt = torch.from_numpy(load(f"{d}/t10k-labels-idx1-ubyte.gz", 8, (-1,)).copy()).long()
    x = (x / 255 - 0.2860) / 0.3530
    xt = (xt / 255 - 0.2860) / 0.3530
    loader = DataLoader(TensorDataset(x, y), batch_size=a.batch, shuffle=True, drop_last=True)
    if a.model == "mlp":
        model = nn.Sequential(nn.Linear(784, a.units), nn.ReLU(),
                              nn.Linear(a.units, a.units), nn.ReLU(),
                              nn.Linear(a.units, 10))
    else:  # dial-train's default CNN: two conv blocks, a dense layer
        model = nn.Sequential(
            nn.Unflatten(1, (1, 28, 28)),
            nn.Conv2d(1, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32),
            nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64),
            nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(64 * 7 * 7, a.units), nn.ReLU(),
            nn.Linear(a.units, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    step = 0
    start = time.perf_counter()
    while step < a.steps:
        for xb, yb in loader:
            opt.zero_grad()
            loss = loss_fn(model(xb), yb)
            loss.backward()
            opt.step()
            step += 1
            if step == a.steps:
                break
    elapsed = time.perf_counter() - start
    model.eval()
    with torch.no_grad():
        acc = sum((model(xt[i:i + 1000]).argmax(1) == yt[i:i + 1000]).sum().item()
                  for i in range(0, len(yt), 1000)) / len(yt)
    print(f"samples_per_s {a.steps * a.batch / elapsed:.0f} val_accuracy {acc:.4f}")


if __name__ == "__main__":
    main()

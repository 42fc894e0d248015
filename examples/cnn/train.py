"""Train the LeNet-like CNN of seed paper 000's case study (examples/cnn/lenet.ard)
with arden's C backend from Python, following the protocol of shared/cnn/README.md:
epochs over the training images in their stored order, mini-batches of 100
consecutive images, plain SGD `w -= lr * mean gradient` with lr = 2.0. Each epoch
is one call of the `train_epoch` entry (the whole epoch runs in compiled code);
the training loss (`batch_loss`) and test accuracy (`predict`) are evaluated
after each epoch, outside the timed training.

    pip install ./python numpy matplotlib tqdm
    python3 make_data.py --out data               # shared/cnn/make_data.py (needs scikit-learn)
    python examples/cnn/train.py --data data       # 40 epochs, writes cnn_training.png

Options: --epochs N (40), --threads N (1), --lr (2.0), --batch (100),
--plot FILE (cnn_training.png; 'none' for no plot), --quiet (no progress bar).
Prints the time spent in training steps alone, the final mean training loss
and test accuracy (the reference: 94.61 % after 40 epochs, loss 0.033796).
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numpy as np

import arden

HERE = pathlib.Path(__file__).resolve().parent
PROGRAM = HERE / "lenet.ard"
PARAMS = ["k1", "b1", "k2", "b2", "fc", "b"]


def load_data(d: pathlib.Path) -> tuple[tuple[np.ndarray, ...], dict[str, np.ndarray]]:
    """The initial weights (in PARAMS order) and the four data arrays of make_data.py."""
    missing = [n for n in PARAMS + ["train_x", "train_y", "test_x", "test_y"] if not (d / f"{n}.npy").exists()]
    if missing:
        sys.exit(f"train.py: {d} lacks {', '.join(m + '.npy' for m in missing)}: run shared/cnn/make_data.py --out {d}")
    weights = tuple(np.load(d / f"{n}.npy") for n in PARAMS)
    data = {n: np.load(d / f"{n}.npy") for n in ["train_x", "train_y", "test_x", "test_y"]}
    return weights, data


def accuracy(m: "arden.Module", weights: tuple, x: np.ndarray, y: np.ndarray) -> float:
    """Share of the images whose largest output is their label."""
    out = np.asarray(m.predict(*weights, x))
    return float(np.mean(np.argmax(out, axis=1) == y))


def train(args: argparse.Namespace) -> dict:
    weights, data = load_data(pathlib.Path(args.data))
    m = arden.compile(PROGRAM.read_text(), backend="c", threads=args.threads)
    n_used = len(data["train_x"]) // args.batch * args.batch
    history = {"epoch": [0], "loss": [m.batch_loss(*weights, data["train_x"], data["train_y"])],
               "accuracy": [accuracy(m, weights, data["test_x"], data["test_y"])]}
    bar = None
    if not args.quiet:
        try:
            from tqdm import tqdm
            bar = tqdm(total=args.epochs, unit="epoch")
        except ImportError:
            pass
    seconds = 0.0
    for epoch in range(1, args.epochs + 1):
        t0 = time.perf_counter()
        weights = m.train_epoch(*weights, data["train_x"], data["train_y"], args.lr, args.batch)
        seconds += time.perf_counter() - t0
        loss = m.batch_loss(*weights, data["train_x"][:n_used], data["train_y"][:n_used])
        acc = accuracy(m, weights, data["test_x"], data["test_y"])
        history["epoch"].append(epoch)
        history["loss"].append(loss)
        history["accuracy"].append(acc)
        line = f"epoch {epoch:3d}  loss {loss:.6f}  test accuracy {100 * acc:.2f} %"
        if bar is not None:
            bar.set_postfix_str(line)
            bar.update(1)
        elif not args.quiet:
            print(line, flush=True)
    if bar is not None:
        bar.close()
    history["train_seconds"] = seconds
    history["weights"] = weights
    return history


def plot(history: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    a.plot(history["epoch"], history["loss"], marker=".")
    a.set_xlabel("epoch")
    a.set_ylabel("mean training loss")
    a.set_yscale("log")
    b.plot(history["epoch"], [100 * x for x in history["accuracy"]], marker=".", color="C1")
    b.set_xlabel("epoch")
    b.set_ylabel("test accuracy (%)")
    fig.suptitle("LeNet (paper 000) trained with arden")
    fig.tight_layout()
    fig.savefig(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="data", help="the directory make_data.py wrote (default: data)")
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--lr", type=float, default=2.0)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--plot", default="cnn_training.png", help="the image to write ('none': no plot)")
    ap.add_argument("--quiet", action="store_true", help="no progress bar or per-epoch lines")
    args = ap.parse_args()
    if args.epochs < 0 or args.batch < 1 or args.threads < 1:
        ap.error("--epochs must be >= 0, --batch and --threads >= 1")
    h = train(args)
    print(f"{args.epochs} epochs in {h['train_seconds']:.2f} s of training ({args.threads} thread(s)); "
          f"final training loss {h['loss'][-1]:.6f}, test accuracy {100 * h['accuracy'][-1]:.2f} %")
    if args.plot != "none":
        plot(h, args.plot)
        print(f"wrote {args.plot}")


if __name__ == "__main__":
    main()

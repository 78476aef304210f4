"""Prints what well-known kinds of training scripts print, for the tests of
hvdshim-ab's metric reading (tests/tools/hvdshim-ab.sh): no training, only
their output, in their formats, with their start-up noise.

    ab_printers.py FORMAT [--sleep S] [--no-val-under-mpi]

gpt       a character-level GPT script run as its README says for a CPU: the
          config file and its overrides echoed, start-up counts, a
          GradScaler warning, "step N: train loss X, val loss Y" every
          eval_interval and "iter N: loss X, time Yms, mfu Z%" every iter
loop      print(f"iter {i}: loss {loss:.4f}") after a few start-up lines
hf        Hugging Face Trainer: warnings, a tqdm bar, {'loss': ..} dicts,
          an eval dict per epoch, the train summary dict once
keras     Keras fit(): "Epoch 1/3", carriage-return progress lines with
          ETA, "- loss: 0.12 - accuracy: 0.90 - val_loss: .." per epoch
tqdm      a loop under tqdm with set_postfix(loss=.., acc=..), redrawn with
          carriage returns on stderr
settings  a script that echoes its settings (argparse Namespace, a config
          dict, JSON, "lr = 0.1"), prints its model, raises warnings and a
          caught traceback, and prints "Epoch 3 finished with loss 0.5,
          accuracy 91.2%"

--sleep S waits S seconds after each training line (the time to a target
is then measurable); --no-val-under-mpi leaves out the gpt format's
"step" lines (val loss) when run under mpirun (a metric only some
configurations print).
"""
import json
import math
import os
import sys
import time
import warnings

fmt = sys.argv[1] if len(sys.argv) > 1 else "gpt"
pause = float(sys.argv[sys.argv.index("--sleep") + 1]) if "--sleep" in sys.argv else 0.0
under_mpi = any(v in os.environ for v in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"))
rank = next((os.environ[v] for v in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK") if v in os.environ), "0")
if rank != "0":  # rank 0 alone prints, as under hvdshim a PyTorch script's other ranks' stdout is dropped
    sys.stdout = sys.stderr = open(os.devnull, "w")
no_val = "--no-val-under-mpi" in sys.argv and under_mpi


def curve(i, start=4.2, end=0.7, k=0.15):
    """A loss falling from start to end, with a little deterministic noise."""
    return end + (start - end) * math.exp(-k * i) + 0.01 * math.sin(7 * i)


def tick():
    sys.stdout.flush()
    sys.stderr.flush()
    if pause:
        time.sleep(pause)


def gpt():
    print("Overriding config with config/train_shakespeare_char.py:")
    print("# train a miniature character-level shakespeare model\n"
          "# good for debugging and playing on macbooks and such\n")
    for line in ("out_dir = 'out-shakespeare-char'", "eval_interval = 250 # keep frequent because we'll overfit",
                 "eval_iters = 200", "log_interval = 10 # don't print too too often",
                 "always_save_checkpoint = False", "wandb_log = False # override via command line if you like",
                 "dataset = 'shakespeare_char'", "gradient_accumulation_steps = 1", "batch_size = 64",
                 "block_size = 256 # context of up to 256 previous characters", "n_layer = 6", "n_head = 6",
                 "n_embd = 384", "dropout = 0.2",
                 "learning_rate = 1e-3 # with baby networks can afford to go a bit higher", "max_iters = 5000",
                 "lr_decay_iters = 5000 # make equal to max_iters usually",
                 "min_lr = 1e-4 # learning_rate / 10 usually",
                 "beta2 = 0.99 # make a bit bigger because number of tokens per iter is small",
                 "warmup_iters = 100 # not super necessary potentially"):
        print(line)
    for k, v in (("device", "cpu"), ("compile", "False"), ("eval_iters", "20"), ("log_interval", "1"),
                 ("block_size", "64"), ("batch_size", "12"), ("n_layer", "4"), ("n_head", "4"), ("n_embd", "128"),
                 ("max_iters", "2000"), ("lr_decay_iters", "2000"), ("dropout", "0.0"), ("eval_interval", "50")):
        print("Overriding: %s = %s" % (k, v))
    print("tokens per iteration will be: 768")
    print("found vocab_size = 65 (inside data/shakespeare_char/meta.pkl)")
    print("Initializing a new model from scratch")
    print("number of parameters: 0.80M")
    sys.stdout.flush()
    sys.stderr.write("/usr/lib/python3/dist-packages/torch/cuda/amp/grad_scaler.py:118: UserWarning: "
                     "torch.cuda.amp.GradScaler is enabled, but CUDA is not available.  Disabling.\n"
                     "  warnings.warn(\n")
    sys.stderr.flush()
    print("num decayed parameter tensors: 18, with 811,136 parameters")
    print("num non-decayed parameter tensors: 9, with 1,152 parameters")
    print("using fused AdamW: False")
    for it in range(0, 21):
        if it % 10 == 0 and not no_val:
            print("step %d: train loss %.4f, val loss %.4f" % (it, curve(it), curve(it) + 0.05))
        print("iter %d: loss %.4f, time %.2fms, mfu %.2f%%" % (
            it, curve(it), 1514.16 if it == 0 else 50.11 + (it % 3), -100.0 if it < 5 else 0.03 + it / 1000))
        tick()


def loop():
    print("Using device: cpu")
    print("Loaded 60000 training samples, 10000 test samples")
    print("model has 101,770 parameters")
    for i in range(12):
        print(f"iter {i}: loss {curve(i, 2.3, 0.3):.4f}")
        tick()
    print("done in 3.2 s")


def hf():
    sys.stderr.write("Some weights of BertForSequenceClassification were not initialized from the model checkpoint "
                     "at bert-base-uncased and are newly initialized: ['classifier.bias', 'classifier.weight']\n"
                     "You should probably TRAIN this model on a down-stream task to be able to use it for "
                     "predictions and inference.\n")
    sys.stderr.write("/usr/lib/python3/dist-packages/transformers/optimization.py:411: FutureWarning: This "
                     "implementation of AdamW is deprecated and will be removed in a future version.\n"
                     "  warnings.warn(\n")
    total = 20
    for step in range(1, total + 1):
        bar = "\u2588" * (step * 10 // total) + " " * (10 - step * 10 // total)
        sys.stderr.write("\r %3d%%|%s| %d/%d [00:%02d<00:%02d,  4.%02dit/s]" % (
            step * 100 // total, bar, step, total, step // 4, (total - step) // 4, step))
        if step % 5 == 0:
            sys.stderr.write("\n")
            sys.stderr.flush()
            print({"loss": round(curve(step, 0.69, 0.2, 0.1), 4), "grad_norm": round(1.5 + math.sin(step), 3),
                   "learning_rate": 5e-05 * (1 - step / total), "epoch": round(step / 10, 2)})
        if step % 10 == 0:
            sys.stdout.flush()
            e = step // 10
            print({"eval_loss": round(curve(step, 0.69, 0.25, 0.1), 4), "eval_accuracy": 0.7 + 0.05 * e,
                   "eval_runtime": 1.2 + 0.01 * e, "eval_samples_per_second": 408.1 - e,
                   "eval_steps_per_second": 51.0 - e / 10, "epoch": float(e)})
        tick()
    sys.stderr.write("\n")
    print({"train_runtime": 12.34, "train_samples_per_second": 12.97, "train_steps_per_second": 1.62,
           "train_loss": 0.4321, "epoch": 2.0})


def keras():
    for epoch in range(1, 4):
        print("Epoch %d/3" % epoch)
        for b in range(1, 33, 8):
            bar = "=" * (b * 30 // 32 - 1) + ">" + "." * (30 - b * 30 // 32)
            sys.stdout.write("\r%2d/32 [%s] - ETA: %ds - loss: %.4f - accuracy: %.4f" % (
                b, bar, (32 - b) // 8, curve(epoch * 4 + b // 8, 0.7, 0.1), 0.5 + 0.1 * epoch + b / 1000))
            sys.stdout.flush()
        i = epoch * 4 + 4
        sys.stdout.write("\r32/32 [==============================] - 0s 2ms/step - loss: %.4f - accuracy: %.4f - "
                         "val_loss: %.4f - val_accuracy: %.4f\n" % (curve(i, 0.7, 0.1), 0.5 + 0.1 * epoch + 0.05,
                                                                    curve(i, 0.7, 0.15), 0.5 + 0.1 * epoch))
        tick()


def tqdm_bar():
    for epoch in range(1, 3):
        for b in range(0, 51, 10):
            pct = b * 100 // 50
            bar = "\u2588" * (pct // 10) + " " * (10 - pct // 10)
            post = "" if b == 0 else ", loss=%.3f, acc=%.3f" % (curve(epoch * 5 + b // 10, 1.0, 0.2),
                                                               0.5 + 0.02 * (epoch * 5 + b // 10))
            sys.stderr.write("\rEpoch %d: %3d%%|%s| %d/50 [00:%02d<00:%02d, %s%s]" % (
                epoch, pct, bar, b, b // 10, (50 - b) // 10, "?it/s" if b == 0 else "%.2fit/s" % (30 + b / 10), post))
            sys.stderr.flush()
            tick()
        sys.stderr.write("\n")


def settings():
    print("Namespace(batch_size=64, epochs=3, lr=0.1, momentum=0.9, seed=1, log_interval=10)")
    print({"lr": 0.1, "batch_size": 64, "weight_decay": 0.0005})
    print(json.dumps({"lr": 0.01, "warmup": 100, "dropout": 0.1}))
    print("lr = 0.1")
    print("batch size = 64")
    print("Net(\n  (conv1): Conv2d(1, 32, kernel_size=(3, 3), stride=(1, 1))\n  (fc1): Linear(in_features=9216, "
          "out_features=128, bias=True)\n  (fc2): Linear(in_features=128, out_features=10, bias=True)\n)")
    sys.stdout.flush()
    warnings.warn("The default value of the antialias parameter will change from None to True in v0.17 "
                  "(size 224, step 3)", UserWarning)
    warnings.warn("epoch 2: lr 0.05 is deprecated", DeprecationWarning)
    for epoch in range(1, 5):
        if epoch == 2:
            try:
                raise ValueError("batch 7: loss 0.5 is nan")
            except ValueError:
                import traceback
                traceback.print_exc()
                sys.stderr.flush()
        print("Epoch %d finished with loss %.3f, accuracy %.1f%% (lr = 0.1, 938 batches, 60000 samples)" % (
            epoch, curve(epoch, 1.0, 0.2, 0.5), 85 + 2 * epoch))
        tick()
    print("Test set: Average loss: 0.0312, Accuracy: 9893/10000 (99%)")


warnings.simplefilter("always")
{"gpt": gpt, "loop": loop, "hf": hf, "keras": keras, "tqdm": tqdm_bar, "settings": settings}[fmt]()

"""Ordinary HuggingFace scripts (they know nothing of ranks): a tiny BERT
built from a config (no download) trained on synthetic data, either with
Trainer(...).train() or with a plain Accelerator().prepare(...) loop.

    python hf_train.py trainer|accelerate --out DIR [--batch B] [--use-cpu] [--eval-each-epoch] [--checkpoints]

Prints the Trainer's log lines (or "step N loss L"), then "checksum C" (the
sum of the weights) on stderr, and saves the model to DIR (save_model, or
accelerator.save_model).  --eval-each-epoch: the Trainer also evaluates
after every epoch (eval_strategy="epoch") and prints "epoch E trained I..."
(the indices of the samples the epoch's steps read).  --checkpoints
(trainer): a checkpoint every 4 steps keeping the last 2 (save_total_limit),
evaluated, the best loaded back at the end (load_best_model_at_end), then
the model saved with save_pretrained and read back with from_pretrained
("reloaded C")."""
import argparse
import sys

import torch
from torch.utils.data import Dataset


class Synthetic(Dataset):
    """Token sequences whose label is whether token 1 appears more than token 2."""

    def __init__(self, n, seq=12, vocab=32):
        g = torch.Generator().manual_seed(123)
        self.ids = torch.randint(3, vocab, (n, seq), generator=g)
        self.ids[:, ::3] = torch.randint(1, 3, (n, (seq + 2) // 3), generator=g)
        self.labels = ((self.ids == 1).sum(1) > (self.ids == 2).sum(1)).long()

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "attention_mask": torch.ones_like(self.ids[i]), "labels": self.labels[i]}


def tiny_bert():
    from transformers import BertConfig, BertForSequenceClassification
    cfg = BertConfig(vocab_size=32, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=32, max_position_embeddings=16, num_labels=2,
                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    return BertForSequenceClassification(cfg)


def checksum(model):
    return sum(float(p.detach().double().sum()) for p in model.parameters())


class Read(Synthetic):
    """Synthetic, noting the indices read."""
    read = []

    def __getitem__(self, i):
        self.read.append(int(i))
        return super().__getitem__(i)


def trainer(args):
    import inspect
    from transformers import Trainer, TrainerCallback, TrainingArguments
    model = tiny_bert()
    more, extra = {"save_strategy": "no"}, {}
    key = "eval_strategy" if "eval_strategy" in inspect.signature(TrainingArguments).parameters \
        else "evaluation_strategy"
    if args.eval_each_epoch:
        more = {"save_strategy": "no", key: "epoch", "per_device_eval_batch_size": args.batch}

        class Trained(TrainerCallback):
            def on_epoch_end(self, _args, state, control, **kw):
                print("epoch %d trained %s" % (round(state.epoch) - 1, " ".join(map(str, sorted(Read.read)))),
                      flush=True)
                Read.read.clear()
        extra = {"eval_dataset": Synthetic(40), "callbacks": [Trained()]}
    if args.checkpoints:
        more = {"save_strategy": "steps", "save_steps": 4, "save_total_limit": 2, key: "steps", "eval_steps": 4,
                "load_best_model_at_end": True, "metric_for_best_model": "loss"}
        import os
        import time
        rank = os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "0"))

        class Behind(TrainerCallback):
            """Rank 1 saves a moment after rank 0 (the test's, not the
            script's: hf.sh checks that rank 1's copies are served from
            rank 0's files, which must be there first; under load rank 1
            could save first, and its copies then stay whole)."""
            def on_step_end(self, _args, state, control, **kw):
                if control.should_save and rank == "1":
                    time.sleep(0.5)
        extra = {"eval_dataset": Synthetic(32), "callbacks": [Behind()]}
    targs = TrainingArguments(output_dir=args.out, per_device_train_batch_size=args.batch, num_train_epochs=2,
                              learning_rate=1e-3, logging_steps=4, report_to=[], seed=0,
                              disable_tqdm=True, use_cpu=args.use_cpu, dataloader_num_workers=0, **more)
    t = Trainer(model=model, args=targs, train_dataset=Read(args.samples), **extra)
    t.train()
    t.save_model(args.out)
    print("checksum %.9f" % checksum(t.model), file=sys.stderr, flush=True)
    if args.checkpoints:
        import os
        from transformers import BertForSequenceClassification
        t.model.save_pretrained(os.path.join(args.out, "final"))
        back = BertForSequenceClassification.from_pretrained(os.path.join(args.out, "final"))
        print("reloaded %.9f" % checksum(back), file=sys.stderr, flush=True)


def accelerate(args):
    from accelerate import Accelerator
    acc = Accelerator(cpu=args.use_cpu)
    model = tiny_bert()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    torch.manual_seed(0)
    loader = torch.utils.data.DataLoader(Synthetic(args.samples), batch_size=args.batch, shuffle=True)
    model, opt, loader = acc.prepare(model, opt, loader)
    model.train()
    step = 0
    for _ in range(2):
        for batch in loader:
            out = model(**batch)
            acc.backward(out.loss)
            opt.step()
            opt.zero_grad()
            step += 1
            if step % 4 == 0:
                print("step %d loss %.4f" % (step, out.loss.item()), flush=True)
    acc.wait_for_everyone()
    acc.save_model(model, args.out)
    print("checksum %.9f" % checksum(acc.unwrap_model(model)), file=sys.stderr, flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=["trainer", "accelerate"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--samples", type=int, default=128)
    ap.add_argument("--use-cpu", action="store_true")
    ap.add_argument("--checkpoints", action="store_true")
    ap.add_argument("--eval-each-epoch", action="store_true")
    args = ap.parse_args()
    {"trainer": trainer, "accelerate": accelerate}[args.kind](args)


if __name__ == "__main__":
    main()

"""DataLoaders sharded by use (HVDSHIM_DATA).  Its modules, lowest layer
first (a module imports only those listed before it: tests/unit/pyimports.py):

  roles         a loader's role per iteration (sharded: it trains; whole: it
                evaluates) and what len(loader) answers
  dealing       which samples or batches are this rank's (arithmetic)
  epoch_order   the epoch's order agreed: rank 0's, a window at a time
  iteration     what every dealt iteration shares (its batches noted, split
                slices' padding flags, a restarted job's skip)
  redeal        HVDSHIM_ELASTIC: what loader workers were asked for, dealt again
  sharded       the batch sampler put in place of a map-style loader's
  iterable      loaders without a batch sampler, dealt as streams
  loaders       DataLoader made, iterated, measured: where each goes
  same_batches  every rank training on the same batches, named once

install.py wraps DataLoader's __init__, __iter__ and __len__ with
loaders.py, iterable.py and roles.py."""

"""The job as this rank sees it (one object, _S): its place, whether the
adapter distributes the script, the settings (read once, at install), what
the adapter follows of the script, and the counts and facts several layers
read.  What one layer alone keeps is in that layer's own module (models._M,
gradients.*, data.*, rng._R, output._O, elastic._E, grow._G)."""
import weakref

from .capi import info, warn


class _State:
    def __init__(self):
        # this rank's place (elastic.recover: the survivors' after a death)
        self.rank = self.size = self.local_rank = self.local_size = 0
        self.enabled = False        # distributing this script (False: stood aside, or 1 rank)
        self.started = False        # hvd_init done (lifecycle._start)
        self.observe = False        # HVDSHIM_OBSERVE=1 in one plain process: count samples and steps only
        self.aside_reason = None    # why the adapter stood aside
        self.elastic = False        # HVDSHIM_ELASTIC: the adapter follows changes of ranks (elastic.follow)
        self.resume_steps = None    # a job started again to grow whose script is not back yet: the steps it had done
        # the settings
        self.data_mode = "shard"    # HVDSHIM_DATA
        self.data_iterable = "deal"  # HVDSHIM_DATA_ITERABLE
        self.scale_lr = False       # HVDSHIM_SCALE_LR
        self.rng_mode = "per-rank"  # HVDSHIM_RNG
        self.rng_default = True     # HVDSHIM_RNG not set (per-rank by default; same where every rank has the same batches)
        self.check_steps = 0        # HVDSHIM_CHECK_STEPS
        self.accumulate = True      # HVDSHIM_ACCUMULATE auto: learn k backward passes per step and reduce once
        self.bucket = 0             # HVDSHIM_BUCKET: bytes batched before they are handed over (0: none)
        self.overlap = True         # HVDSHIM_OVERLAP: host-memory gradients handed over during backward (else at its end)
        self.average_loss = True    # HVDSHIM_LOSS=average: a loss given to backward reads as the mean over ranks
        self.grad_op = 1            # HVDSHIM_GRADIENTS: capi.AVG (average) or capi.SUM (sum)
        self.shares = False         # split mode, average: each rank's gradient weighed by its share of a mean loss
        self.sync_bn = False        # HVDSHIM_SYNC_BN: BatchNorm's training statistics over every rank's batch (norms.py)
        self.count_samples = False  # HVDSHIM_METRICS: every root forward counts its batch
        # what the adapter follows of the script (weak references)
        self.models = []            # registered root modules
        self.roots = weakref.WeakSet()  # the registered roots
        self.horovod_init = False   # the served horovod package's hvd.init() was called (lifecycle.horovod_init)
        self.optimizers = []        # in creation order (hyperparameters follow rank 0)
        self.free_pending = False   # an optimizer was made or given a group since the last look for free parameters
        self.schedulers = []        # the LR schedulers made (HVDSHIM_SCALE_LR: their base_lrs; resize: their state)
        self.loaders = 0            # DataLoaders made (the next one's tag)
        self.loader_refs = {}       # loader tag -> the DataLoader
        # the hooks the adapter put on torch (taken off when it stands aside)
        self.hook_handles = []
        # the global forward pre-hook (models.py): on while a module made so far
        # may still have its first forward ahead, a parameter is frozen or
        # samples are counted; off otherwise (every module call then takes
        # torch's fast path), and on again when a module is made
        self.fwd_hook = None        # its handle while it is on
        self.fwd_hook_fn = None     # the hook
        self.recheck = False        # a module was registered or found parameterless: look at the fresh ones again
        # counts
        self.steps = 0              # optimizer steps taken
        self.reductions = 0         # reducing backward passes (an agreed count: every rank takes part in each)
        self.samples = 0            # training samples seen by the roots since the last optimizer step
        self.bn_calls = 0           # synced BatchNorm calls since the last optimizer step (their allreduces' names)
        # the batch in use, as the loaders dealt it (loss shares and BatchNorm read it)
        self.whole_batches = True   # no dealt batch since the last loader iteration was made (each rank: whole batches)
        self.nominal_rows = None    # split mode: the batch size of the loader last dealt (loss_shares._divided_by_batch)
        self.pad_slice = False      # split mode: this rank's slice of the batch in use is padding (a batch of fewer
                                    # rows than ranks): its share counts for nothing (dealing.padding_only)
        # called when the engine has started (lifecycle._start), and when this
        # rank has taken a change of ranks in (elastic.recover)
        self.on_start = []
        self.on_change = []
        self.warned = set()         # the keys of the lines said once


_S = _State()


def is_number(v):
    """A plain int or float (a hyperparameter's value), not a bool flag."""
    return type(v) is float or (isinstance(v, (int, float)) and not isinstance(v, bool))  # (floats: most, first)


def optimizer_step(n):
    """"optimizer step N" for a message, saying that the count is of every
    optimizer's steps where more than one is alive (a GAN's two: step 18
    is the script's 9th iteration)."""
    k = sum(1 for ref in _S.optimizers if ref() is not None)
    return "optimizer step %d" % n + (" (the steps of its %d optimizers counted together)" % k if k > 1 else "")


def _say_once(key, say, msg):
    if key not in _S.warned:
        _S.warned.add(key)
        say(msg)


def _warn_once(key, msg):
    _say_once(key, warn, msg)


def _info_once(key, msg):
    _say_once(key, info, msg)

"""The adapter's state in this rank (one _State object, _S)."""
import weakref

from .capi import info, warn


class _State:
    def __init__(self):
        self.rank = self.size = self.local_rank = self.local_size = 0
        self.enabled = False        # distributing this script (False: stood aside, or 1 rank)
        self.started = False        # hvd_init done
        self.observe = False        # HVDSHIM_OBSERVE=1 in one plain process: count samples and steps only
        self.aside_reason = None
        self.data_mode = "shard"
        self.data_iterable = "deal"
        self.scale_lr = False
        self.models = []            # registered root modules (weak)
        self.known = weakref.WeakSet()      # every module of a registered root
        self.roots = weakref.WeakSet()      # the registered roots
        self.paramless = weakref.WeakSet()  # roots without parameters or buffers
        self.lazy_wait = weakref.WeakSet()  # the modules of a root in its first forward, registered after it (lazy)
        # The global forward pre-hook (models.py): on while a module made so far
        # may still have its first forward ahead, a parameter is frozen or
        # samples are counted; off otherwise (every module call then takes
        # torch's fast path), and on again when a module is made
        self.fwd_hook = None        # its handle while it is on
        self.fwd_hook_fn = None     # the hook
        self.fresh = weakref.WeakSet()  # modules made and not yet seen known or parameterless
        self.recheck = False        # a module was registered or found parameterless: look at fresh again
        self.count_samples = False  # HVDSHIM_METRICS: every root forward counts its batch
        self.frozen = []            # _Param not yet hooked (requires_grad False)
        self.bucket = 0             # HVDSHIM_BUCKET: bytes batched before they are handed over (0: none)
        self.overlap = True         # HVDSHIM_OVERLAP: host-memory gradients handed over during backward (else at its end)
        self.hook_handles = []
        self.loaders = 0
        self.warned = set()
        self.stdout_saved = None
        self.stderr_orig = None
        self.quiet_console = False  # console logging below WARNING dropped (ranks other than 0)
        self.samples = 0            # training samples seen by the roots since the last optimizer step
        self.rng_mode = "per-rank"  # HVDSHIM_RNG
        self.rng_synced = False     # rank 0's states taken (engine start)
        self.rng_diverged = False   # per-rank streams from the first backward on
        self.rng_seed = None        # the job's agreed seed of the step window's shared streams (engine start)
        self.rng_shared = {}        # device -> the shared stream's state, between windows (rng.window_open)
        self.rng_window = None      # while a window is open: [(device, generator, this rank's own state)]
        self.optimizers = []        # weak references, in creation order (hyperparameters follow rank 0)
        self.steps = 0              # optimizer steps taken (replica guard)
        self.reductions = 0         # reducing backward passes (an agreed count: every rank takes part in each)
        self.whole_batches = True   # no dealt batch since the last loader iteration was made (each rank: whole batches)
        self.adopt = False          # a registered root has parameters not yet followed (models.adopt_new)
        self.free_pending = False   # an optimizer was made or given a group since the last look for free parameters
        self.applying = 0           # Module._apply depth (conversions: the hooks follow at the outermost)
        self.check_steps = 0        # HVDSHIM_CHECK_STEPS
        # gradient accumulation (HVDSHIM_ACCUMULATE): k backward passes per optimizer step
        self.accumulate = True      # auto: learn k and reduce once per step
        self.average_loss = True    # HVDSHIM_LOSS=average: a loss given to backward reads as the mean over ranks
        self.grad_op = 1            # HVDSHIM_GRADIENTS: capi.AVG (average) or capi.SUM (sum)
        self.nominal_rows = None    # split mode: the batch size of the loader last dealt (loss_shares._divided_by_batch)
        self.pad_slice = False      # split mode: this rank's slice of the batch in use is padding (a batch of fewer
                                    # rows than ranks): its share counts for nothing (dealing.padding_only)
        self.sync_bn = False        # HVDSHIM_SYNC_BN: BatchNorm's training statistics over every rank's batch (norms.py)
        self.bn_calls = 0           # its calls since the last optimizer step (their allreduces' names)
        self.shares = False         # split mode, average: each rank's gradient weighed by its share of a mean loss
        # HVDSHIM_ELASTIC (elastic.py): ranks may die and the script goes on
        self.elastic = False        # the adapter follows changes of ranks
        self.changes = 0            # changes taken in
        self.took_over = False      # this rank became rank 0 after the first one died
        self.schedulers = []        # HVDSHIM_SCALE_LR: weakrefs to the LR schedulers made (their base_lrs)
        # hosts joining (resize.py): a job started again to grow
        self.resume_steps = None    # its script is not back yet: the optimizer steps the job had done
        self.on_start = []          # called when the engine has started (lifecycle._start)
        self.loader_refs = {}       # loader tag -> the DataLoader (weak)
        self.on_change = []         # called when this rank has taken a change of ranks in (elastic.recover)


_S = _State()


def is_number(v):
    """A plain int or float (a hyperparameter's value), not a bool flag."""
    return type(v) is float or (isinstance(v, (int, float)) and not isinstance(v, bool))  # (floats: most, first)


def _say_once(key, say, msg):
    if key not in _S.warned:
        _S.warned.add(key)
        say(msg)


def _warn_once(key, msg):
    _say_once(key, warn, msg)


def _info_once(key, msg):
    _say_once(key, info, msg)

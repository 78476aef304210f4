"""The adapter's state in this rank (one _State object, _S)."""
import weakref

from .lib import _Batch, _Pending, _info, _warn


class _ParamMap:
    """Parameter -> value by identity, not keeping the parameter alive.  (A
    WeakKeyDictionary finds a key by ==, which compares tensors element by
    element: looking up a parameter it holds raised "Boolean value of
    Tensor with more than one value is ambiguous".)"""

    def __init__(self):
        self._d = {}

    def __setitem__(self, p, value):
        key, d = id(p), self._d

        def gone(_ref):
            e = d.get(key)
            if e is not None and e[0]() is None:  # (not a newer parameter at the same address)
                del d[key]
        d[key] = (weakref.ref(p, gone), value)

    def get(self, p, default=None):
        e = self._d.get(id(p))
        return e[1] if e is not None and e[0]() is p else default

    def __contains__(self, p):
        e = self._d.get(id(p))
        return e is not None and e[0]() is p

    def __len__(self):
        return len(self._d)

    def __getitem__(self, p):
        e = self._d.get(id(p))
        if e is None or e[0]() is not p:
            raise KeyError(p)
        return e[1]


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
        self.by_param = _ParamMap()  # parameter -> _Param
        self.params = []            # _Param, index = position in the used-bitmap
        self.frozen = []            # _Param not yet hooked (requires_grad False)
        self.in_backward = False
        self.bw_depth = 0           # torch.autograd.backward calls running (more than 1: one inside another's backward)
        self.end_outer = False      # a nested backward took the first gradient: the outermost call ends the backward
        self.used = bytearray()
        self.pending = _Pending()
        self.batch = _Batch()       # gradients not yet handed to the engine
        self.bucket = 0             # HVDSHIM_BUCKET: bytes batched before they are handed over (0: none)
        self.overlap = True         # HVDSHIM_OVERLAP: host-memory gradients handed over during backward (else at its end)
        self.nhooked = 0            # parameters whose gradients are hooked
        self.round = None           # the end-of-backward round in flight: (vector, slots, pending)
        self.sparse = []            # (param, handles) gathered at the end of backward
        self.submitted = set()
        self.early = set()          # param indices averaged in backward, before a script's hook (_hooked_grad)
        self.early_hooked = _ParamMap()  # leaves whose first hook is grads._hooked_grad
        self.early_acc = _ParamMap()  # leaves whose first post-accumulate-grad hook is grads._accumulated_grad
        self.hook_handles = []
        self.loaders = 0
        self.warned = set()
        self.stdout_saved = None
        self.stderr_orig = None
        self.quiet_console = False  # console logging below WARNING dropped (ranks other than 0)
        self.samples = 0            # training samples seen by the roots since the last optimizer step
        self.in_step = 0            # optimizer.step depth (a subclass may call its parent's step)
        self.rng_mode = "per-rank"  # HVDSHIM_RNG
        self.rng_synced = False     # rank 0's states taken (engine start)
        self.rng_diverged = False   # per-rank streams from the first backward on
        self.rng_seed = None        # the job's agreed seed of the step window's shared streams (engine start)
        self.rng_shared = {}        # device -> the shared stream's state, between windows (rng.window_open)
        self.rng_window = None      # while a window is open: [(device, generator, this rank's own state)]
        self.optimizers = []        # weak references, in creation order (hyperparameters follow rank 0)
        self.steps = 0              # optimizer steps taken (replica guard)
        self.reductions = 0         # reducing backward passes (an agreed count: every rank takes part in each)
        self.grad_calls = 0         # torch.autograd.grad calls on averaged parameters before any reduction (-1: done)
        self.loader_trained = False  # a DataLoader was iterated in training
        # roles.py: what len(loader) answers and the next iteration keeps
        self.data_events = 0        # loader iterations made or run out, and outermost backward passes
        self.mode_event = -1        # data_events at the last Module.train()/eval() (equal: no event since)
        self.whole_batches = True   # no dealt batch since the last loader iteration was made (each rank: whole batches)
        # the training batches of reducing backward passes 2 and 3, summed
        # (data.py: every rank training on the same batches is named once);
        # None once compared, where nothing is compared, or given up (inference)
        self.same_batches = None
        self.compare_batches = False  # the comparison is ahead (the same on every rank)
        self.adopt = False          # a registered root has parameters not yet followed (models.adopt_new)
        self.free_pending = False   # an optimizer was made or given a group since the last look for free parameters
        self.applying = 0           # Module._apply depth (conversions: the hooks follow at the outermost)
        self.root_calls = 0         # root forwards before the first reducing backward (while the above is followed)
        self.check_steps = 0        # HVDSHIM_CHECK_STEPS
        # gradient accumulation (HVDSHIM_ACCUMULATE): k backward passes per optimizer step
        self.accumulate = True      # auto: learn k and reduce once per step
        self.k = 1                  # the agreed k (rank 0's proposal, carried by the last reducing round)
        self.bw_window = 0          # backward passes since the last optimizer step
        self.windows = []           # the last two window lengths (backward passes per step)
        self.skip_bw = False        # this backward only accumulates (a later one of the window reduces)
        self.deferred = False       # gradients accumulated locally and not reduced yet
        self.average_loss = True    # HVDSHIM_LOSS=average: a loss given to backward reads as the mean over ranks
        self.grad_op = 1            # HVDSHIM_GRADIENTS: lib._AVG (average) or lib._SUM (sum)
        self.nominal_rows = None    # split mode: the batch size of the loader last dealt (grads._divided_by_batch)
        self.pad_slice = False      # split mode: this rank's slice of the batch in use is padding (a batch of fewer
                                    # rows than ranks): its share counts for nothing (data.padding_only)
        self.pads_last = None       # split mode: the padding flags of the batch sampler iteration made last
        self.sum_check = True       # split mode, average: the first backward's loss is looked at (grads._looks_summed)
        self.sync_bn = False        # HVDSHIM_SYNC_BN: BatchNorm's training statistics over every rank's batch (norms.py)
        self.bn_calls = 0           # its calls since the last optimizer step (their allreduces' names)
        self.shares = False         # split mode, average: each rank's gradient weighed by its share of a mean loss
        self.share = None           # this reduction's denominator of the loss on this rank (None: not weighed)
        self.share_s = 1.0          # this reduction's factor for this rank's gradients: share / share_c
        self.share_c = 1.0          # the factor's divisor: the last weighed reduction's mean denominator (agreed)
        self.share_f = 1.0          # this reduction's correction, applied to the averaged gradients and loss
        self.share_slots = (None, None)  # (count, size, rank) and this rank's round slots for it (kept)
        self.share_seen = None      # the last weighed reduction's slots (the same again: no correction)
        self.averaged = None        # weak reference to the last loss averaged that way
        self.scaled = None          # (scaled, loss) weak references: the last GradScaler.scale(loss)
        self.lib_loss = None        # the loss given to Accelerator.backward, during that call (install.py)
        self.loss_bufs = {}         # (device, dtype, shape) -> the float32/64 buffer the loss is averaged in
        # HVDSHIM_ELASTIC (elastic.py): ranks may die and the script goes on
        self.elastic = False        # the adapter follows changes of ranks
        self.changes = 0            # changes taken in
        self.took_over = False      # this rank became rank 0 after the first one died
        self.schedulers = []        # HVDSHIM_SCALE_LR: weakrefs to the LR schedulers made (their base_lrs)
        self.local = {}             # param index -> a buffer for a copy of this rank's gradient (kept)
        self.copied = set()         # param indices whose copy holds this step's gradient
        # hosts joining (resize.py): a job started again to grow
        self.resume_steps = None    # its script is not back yet: the optimizer steps the job had done
        self.skip = None            # global batches the loader iteration being made skips (data.take_skip)
        self.skip_taken = False     # data.py took it (it deals this loader)
        self.primer = None          # the loader iterator made last that can skip ahead (data._Primed)
        self.on_start = []          # called when the engine has started (lifecycle._start)
        self.on_stand_aside = None  # resize.stand_aside (set by resize.configure): called as the adapter stands aside
        self.loader_refs = {}       # loader tag -> the DataLoader (weak)
        # HVDSHIM_ELASTIC: sharded iterations whose workers were asked ahead (data._Handout)
        self.live = weakref.WeakSet()
        self.live_last = None       # the one made last (its DataLoader iterator is linked next)
        self.on_change = []         # called when this rank has taken a change of ranks in (elastic.recover)


_S = _State()


def _say_once(key, say, msg):
    if key not in _S.warned:
        _S.warned.add(key)
        say(msg)


def _warn_once(key, msg):
    _say_once(key, _warn, msg)


def _info_once(key, msg):
    _say_once(key, _info, msg)

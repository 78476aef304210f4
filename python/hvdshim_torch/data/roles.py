"""A DataLoader's role in each of its iterations, sharded (it trains) or
whole (it evaluates), and what len(loader) says: the length a script is
told and the batches of the iteration that follows agree.

The evidence, strongest first:
  * gradients disabled (no_grad, inference_mode): evaluation;
  * the models' mode, where the script set it just now (a train()/eval()
    with no backward pass and no loader iteration made or run out since):
    training when a layer (a module holding a parameter that requires
    grad) of a known model is in training mode; a wrapper module's own mode
    does not count (timm-style tasks hold the loss in a module that stays in
    train mode while the inner model evaluates);
  * what the loader's iterations did, seen between two of their batches:
    one that began in training mode and had the models in eval mode and no
    backward pass run at its second batch (ignite's evaluator and skorch's
    validation switch the model inside each step), where none ran a
    backward pass between two batches, evaluates though the models are in
    training mode (not just switched there); so does a loader never
    iterated that reads in order, begun in training mode once another
    loader has trained.  An iteration taken so that runs a backward pass
    after all is said once, and the rule ends;
  * the loader's own past: the kind of iteration that followed its last
    kind the previous time; the first time, the same kind again (a loader
    used both ways alternates);
  * for a loader never iterated: evaluation when a loader has trained
    already, or when it reads in order (shuffle=False) beside one that
    shuffles; else training.
An iteration (DataLoader.__iter__: begin) trains when gradients are
enabled and the models' mode says so (no model known yet: training) and
what its iterations did does not say otherwise; where
the models are in eval mode but were not just switched there (the
HuggingFace Trainer makes an epoch's iterator before training_step calls
model.train()), its past decides.
len(loader):
  * during an iteration (its iterator made, not run out or dropped): that
    iteration's count;
  * right after one ran out: that one's (a running loss / len(loader)),
    unless gradients are off or the mode was just switched;
  * else a prediction for the next iteration from the evidence above, which
    that iteration keeps (`held`) when nothing comes between (no backward,
    no loader iteration made or run out): len, eval()/train(),
    no_grad/inference_mode and the loop agree in any order.
Where the kept answer and the iteration's own decision differ, the
iteration follows len and rank 0 says so once per loader.  In split mode
the count is the same either way: nothing is kept.  A change of ranks
(HVDSHIM_ELASTIC) during an iteration: len is the epoch's count at the new
size."""
import copy
import weakref

import torch

from ..state import _S, _warn_once


class _Events:
    def __init__(self):
        self.data_events = 0        # loader iterations made or run out, and outermost backward passes
        self.backwards = 0          # outermost backward passes
        self.mode_event = -1        # data_events at the last Module.train()/eval() (equal: no event since)
        self.loader_trained = False  # a DataLoader was iterated in training
        self.new_in_order = True    # a new in-order loader begun in train mode beside a trained one evaluates
                                    # (until one such trains: Role.gap)
        self.new_model = lambda: None  # models.new_model_to_train (set by install.py: a layer above)


_EV = _Events()

_TRAIN, _EVAL = 1, 2
_RANDOM_SAMPLERS = ("RandomSampler", "SubsetRandomSampler", "WeightedRandomSampler")


def models_training():
    """None: no model known yet (run), but something to train: an optimizer,
    or a model made in training mode with a trainable parameter; False
    where there is neither (a pass over the data before any model is made:
    dataset statistics).  Else True where a layer (a module holding a
    parameter that requires grad) of a known model is in training mode, or
    a model not run yet whose parameter an optimizer holds is (a student
    beside a teacher in eval mode); False where there are layers and none
    is; with no trainable layer, some model in training mode."""
    roots = list(_S.roots)
    if not roots:
        return None if any(ref() is not None for ref in _S.optimizers) or _EV.new_model() else False
    seen, layers = set(), False
    for root in roots:
        for m in root.modules():
            if id(m) in seen:
                continue
            seen.add(id(m))
            if any(p is not None and p.requires_grad for p in m._parameters.values()):
                if m.training:
                    return True
                layers = True
    if not layers:
        return any(r.training for r in roots)
    return _EV.new_model() == "optimized"


def training_now():
    """An iteration made now trains, by the mode alone (no loader's past)."""
    return _S.enabled and torch.is_grad_enabled() and models_training() is not False


def _just_switched():
    return _EV.mode_event == _EV.data_events


def _sampler_kind(loader):
    """'random', 'order' (SequentialSampler) or None, of a loader's sampler."""
    bs = getattr(loader, "batch_sampler", None)
    bs = getattr(bs, "_inner", bs)  # (a _ShardedBatches: the original)
    s = getattr(loader, "sampler", None) if bs is None else getattr(bs, "sampler", None)  # (custom: unknown)
    for t in type(s).__mro__:
        if t.__name__ in _RANDOM_SAMPLERS:
            return "random"
        if t.__name__ == "SequentialSampler":
            return "order"
    return None


class Role:
    """One loader's decisions (the module's text)."""

    def __init__(self, tag=None, what="a DataLoader", loader=None, same_count=False):
        self.tag, self.what = tag, what
        self.same_count = same_count  # sharded or whole, the same count (split mode): len holds nothing
        self._loader = weakref.ref(loader) if loader is not None else None
        self.kinds = 0          # _TRAIN | _EVAL: its iterations' own kinds so far
        self.last = 0           # the last iteration's own kind (0: none yet)
        self.then = {}          # kind -> the kind of the iteration that came after the last one of that kind
        self.held = None        # (sharded, _EV.data_events): a len() answer between iterations
        self.live = None        # the running iteration's _Live (weak)
        self.sharded = False    # the running (or last) iteration's decision
        self.ended_at = None    # _EV.data_events just after its last iteration ran out
        self.ended_gave = None  # the batches it gave, where the ranks changed during it (gave_after_change)
        self.making = None      # the decision while DataLoader.__iter__ makes the iterator
        self.trained = False    # a backward ran between two batches of one of its iterations: a loader that trains
        self.evaluates = False  # one of its iterations, begun in training mode, had the models in eval mode and had
                                # run no backward at its second batch (or end), and none of them trained (gap)
        self.whole_why = None   # the running iteration is whole by _evaluates_in_train_mode only: which rule
        self.began_training = False  # the running iteration began with gradients on and the models in training mode

    def __getstate__(self):  # (a loader copied: its role without the references)
        state = dict(self.__dict__)
        state["_loader"] = state["live"] = None
        return state

    def __reduce_ex__(self, protocol):  # pickled: None (the plain loader's; _ShardedBatches.__reduce_ex__)
        return type(None), ()

    def __copy__(self):
        new = object.__new__(Role)
        new.__dict__.update(self.__getstate__())
        return new

    def __deepcopy__(self, memo):
        new = memo[id(self)] = object.__new__(Role)
        new.__dict__.update(copy.deepcopy(self.__getstate__(), memo))
        return new

    def _follows(self):
        """What its past says the next iteration is: True (trains), False, or
        None (never iterated)."""
        if not self.last:
            return None
        nxt = self.then.get(self.last, self.last if self.kinds == self.last else self.kinds - self.last)
        return nxt == _TRAIN

    # -- len
    def for_len(self):
        """Sharded or whole, for len() now."""
        if self.making is not None:
            return self.making
        it = self.live() if self.live is not None else None
        if it is not None and not it.ended:
            return self.sharded
        d = self._predict()
        self.held = (d, _EV.data_events)
        return d

    def _predict(self):
        if not (_S.enabled and torch.is_grad_enabled()):
            return False
        m = models_training()
        if m is not None and _just_switched():
            return m
        if self.ended_at == _EV.data_events:  # its iteration has just run out: len is about that one
            return self.sharded
        if m is not False and self._evaluates_in_train_mode():
            return False
        follows = self._follows()
        if follows is not None:
            return follows
        if m is False and not _S.roots:  # nothing made to train yet (models known in eval: guessed below)
            return False
        if _EV.loader_trained:  # another loader trains: a new one is taken to evaluate
            return False
        return not (_sampler_kind(self._loader and self._loader()) == "order" and self._random_beside())

    def _random_beside(self):
        me = self._loader and self._loader()
        for ref in list(_S.loader_refs.values()):
            other = ref()
            if other is not None and other is not me and _sampler_kind(other) == "random":
                return True
        return False

    # -- iterations
    def _own(self):
        """The iteration made now trains, by its own evidence."""
        self.whole_why = None
        self.began_training = False
        if not (_S.enabled and torch.is_grad_enabled()):
            return False
        m = models_training()
        self.began_training = m is True
        if m is False and not _just_switched():
            return bool(self._follows())  # in eval mode since before the last event: its past decides
        if m is True and not _just_switched():
            self.whole_why = self._evaluates_in_train_mode()
        return m is not False and self.whole_why is None

    def _evaluates_in_train_mode(self):
        """With the models in training mode since before the last event (so
        not the script's word for this loop), evidence that the loop
        evaluates all the same, the model switched inside each step (ignite's
        supervised evaluator, skorch's validation): 'past' where the loader
        evaluates (gap); 'new' where it was never iterated, reads in order,
        and another loader trains already; else None.  An iteration taken
        so that trains after all is said once, and ends the rule (gap)."""
        if self.evaluates:
            return "past"
        if not self.last and _EV.loader_trained and _EV.new_in_order \
                and _sampler_kind(self._loader and self._loader()) == "order":
            return "new"
        return None

    def gap(self, live, backward):
        """Between two batches of its running iteration `live` (the second
        one asked for, or the end), whether a backward pass ran since the
        first: one did, a loader that trains; none, with the models in eval
        mode now although the iteration began in training mode (the step
        switched them), or in an iteration taken for an evaluation as a new
        loader, one that evaluates.  Returns whether to go on
        watching (not once it trains)."""
        if self.live is None or self.live() is not live:
            return False
        if not backward:
            if live.asked == 2 and not (self.trained or self.evaluates) and (self.whole_why == "new" or (
                    live.began_training and models_training() is False)):
                self.evaluates = True  # (taken for an evaluation when new, and one so far: goes on being one)
            return True
        self.trained, self.evaluates = True, False
        why, self.whole_why = self.whole_why, None
        if why == "new":
            _EV.new_in_order = False
        if why is not None and _S.rank == 0:
            _warn_once(("taken-for-eval", self.tag), "%s: an iteration begun in training mode was taken for an "
                       "evaluation (%s) and ran a backward pass: it ran whole on every rank (right, and no faster); "
                       "its later iterations in training mode are sharded.  Calling model.train() before the loop "
                       "says so at once" % (self.what, "an earlier one ran in eval mode with no backward pass"
                                            if why == "past" else "a new loader reading in order, begun after "
                                            "another loader trained"))
        return False

    def begin(self):
        """DataLoader.__iter__: this iteration's decision (in `making` while
        the iterator is made, then `sharded`); returns whether it trains by
        its own evidence."""
        own = self._own()
        d = own
        if self.held is not None and self.held[1] == _EV.data_events and not self.same_count:
            d = self.held[0]
            if d != own and _S.rank == 0:
                self._say(d)
        self.held = None
        if d:
            self.whole_why = None
        kind = _TRAIN if own else _EVAL
        if self.last:
            self.then[self.last] = kind
        self.last = kind
        self.kinds |= kind
        self.sharded = self.making = d
        return own

    def _say(self, sharded):
        if sharded:
            _warn_once(("len-held", self.tag, 1), "%s: len() was asked before this evaluation began and answered for "
                       "training (this rank's share of the batches); the evaluation is sharded to agree with it, so "
                       "what the script computes over it covers this rank's part of the data.  Asking len() after "
                       "model.eval() or inside no_grad/inference_mode keeps an evaluation whole" % self.what)
        else:
            _warn_once(("len-held", self.tag, 0), "%s: len() was asked before this training loop began and answered "
                       "for evaluation (the whole loader); the loop is whole on every rank to agree with it (every "
                       "rank trains on all of it: right, and no faster).  Asking len() after model.train() shards it"
                       % self.what)

    def made(self, it):
        """The iteration's iterator, followed until it runs out."""
        self.making = None
        live = _Live(it, self, self.began_training)
        self.live = weakref.ref(live)
        return live

    def ended(self, live):
        if self.live is not None and self.live() is live:
            self.live = None
        _EV.data_events += 1
        self.ended_at = _EV.data_events
        self.ended_gave = live.given if live.size0 != _S.size else None

    def gave_after_change(self):
        """The batches the iteration that has just run out gave, where the
        ranks changed during it (elastic: the rest of its epoch was dealt
        over the survivors), else None: len() right after such a loop (a
        running loss / len(loader)) is about that loop, which gave neither
        the old split's count nor the new one's."""
        return self.ended_gave if self.ended_at == _EV.data_events and self.live is None else None


class _Live:
    """A DataLoader's iterator, as returned to the script: the inner one's
    length and attributes; its end noted (Role.ended)."""

    def __init__(self, inner, role, began_training):
        self._inner, self._role, self.ended = inner, role, False
        self.began_training = began_training  # the models in training mode, gradients on, as it began
        self.asked, self._watch, self._bw = 0, True, _EV.backwards
        self.given, self.size0 = 0, _S.size  # batches given; the ranks as it began (Role.gave_after_change)

    def __iter__(self):
        return self

    def __next__(self):
        if self._watch:
            self.asked += 1
            if self.asked > 1:
                bw = _EV.backwards
                self._watch = self._role.gap(self, bw != self._bw)
                self._bw = bw
        try:
            x = next(self._inner)
        except StopIteration:
            if not self.ended:
                self.ended = True
                self._role.ended(self)
            raise
        self.given += 1
        return x

    def __len__(self):
        return len(self._inner)

    def __getattr__(self, name):
        if name == "_inner":  # (not set yet)
            raise AttributeError(name)
        return getattr(self._inner, name)


def role_of(loader):
    return getattr(loader, "_hvdshim_role", None)


def iteration_begins(loader):
    """DataLoader.__iter__, before its iterator is made: the loader's role
    decides (None: a loader hvdshim leaves alone); an iteration that trains
    is noted (same_batches.check_same_batches)."""
    role = role_of(loader)
    trains = role.begin() if role is not None else training_now()
    if trains:
        _EV.loader_trained = True
    _EV.data_events += 1
    return role


def iteration_made(role, it):
    """DataLoader.__iter__'s iterator (`it`; None if making it failed), as
    the script gets it."""
    if role is None or it is None:
        if role is not None:
            role.making = None
        return it
    return role.made(it)


def note_switch():
    """Module.train(mode) (eval() included), the outermost call: the models'
    mode is the script's word until the next loader or backward event."""
    _EV.mode_event = _EV.data_events

"""Gradients averaged over ranks as backward makes them.  Its modules,
lowest layer first (a module imports only those listed before it:
tests/unit/pyimports.py):

  params        the followed parameters, by index (the used-bitmap's order)
  accumulation  k backward passes per optimizer step: the window, rank 0's proposal
  round_vector  the end-of-backward round's slots by name (pure)
  loss_shares   what the loss is (a mean over what count, a sum): split mode's weighing
  submit        a gradient handed to the engine (batched, weighed, kept; sparse: gathered)
  hyperparams   rank 0's hyperparameters, taken by every rank
  reduction     the end of a reducing backward: the round, the gradients others used,
                rank 0's values, the shares' correction; started over after deaths
  hooks         the parameter hooks (_Param, _grad_ready) and the early-averaging hooks
  replicas      the replica guard (HVDSHIM_CHECK_STEPS)
  backward      torch.autograd.backward wrapped: the loss read after it is the mean
  step          Optimizer.step wrapped: deferred reduction, closure loss, metrics, guard

install.py puts the wrappers on torch; models.py follows the parameters."""

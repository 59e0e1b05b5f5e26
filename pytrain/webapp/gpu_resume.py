"""Layer 9, webapp: the session's side of a run whose optimizer state lives on the GPU only (past the wasm heap's
budget: :func:`pytrain.webapp.gpu_slices.check_heap`), kept out of :mod:`pytrain.webapp.session`: the streamed save
(:mod:`pytrain.webapp.gpu_save`), a lost device, and the ways back to a checkpoint the worker holds outside the heap,
handed over range by range (:mod:`pytrain.webapp.gpu_load`): a new device after a lost one, going back to the last
good checkpoint after a divergence (Session.restore_good)."""
from __future__ import annotations

from typing import Any, Dict

from pytrain.webapp.run_state import Good


def save(session: Any, start: bool = False, good: bool = False) -> Dict[str, Any]:
    """The checkpoint streamed from the GPU when its optimizer state lives there only (``on_heap``: it does not); the
    worker calls again, awaiting the device when ``pending``, until ``done``, and joins the ``chunks``; ``good``: it
    keeps them as the run's last good checkpoint (an epoch's end), Python its position."""
    run = session.run
    if start:
        run.save_progress()
    out = session.gpu.save(bool(start))
    if good and out.get("done"):
        run.keep_good(Good(None, run.at.epoch, run.at.epoch_step, run.at.step))
    return out


def resume(session: Any, size: int = 0, back: bool = False) -> Dict[str, Any]:
    """The run back at the last good checkpoint the worker holds, streamed (:meth:`GpuSlices.resume`): on a renewed
    device after a lost one, or (``back``) on the device it has after a divergence; ``size`` starts, each later call
    takes the range asked for; ``done``: with the model and digest the page shows after going back."""
    out = session.gpu.resume(session.run, int(size), back)
    if out.get("done"):
        run = session.run
        session.exports.forget()   # (the parameters changed)
        # the checkpoint it came from is the last good one: the worker's (it keeps its bytes) with the state on the GPU
        # only, else (a saved run reopened whose state the heap holds) the heap's own
        out["good_streamed"] = session.gpu.moments_on_gpu
        if out["good_streamed"]:
            run.keep_good(Good(None, run.at.epoch, run.at.epoch_step, run.at.step))
        else:
            run.remember_good()
        out.update(model=session.model_summary(), digest=session.digest())
    return out


def reopen(session: Any, size: int) -> Dict[str, Any]:
    """A saved run reopened (:func:`pytrain.webapp.saved_run.restore`, its model built from its artifacts, at its
    position) from its checkpoint of ``size`` bytes the worker holds, handed over range by range
    (:meth:`GpuSlices.reopen`; the worker's later calls are gpu_resume's): the moments go up to the device where the
    state must live on the GPU only, the heap never holding the checkpoint whole."""
    run = session.run
    run.keep_good(None)   # (the build's: the checkpoint reopened becomes the good one)
    batches = run.batches(len(session.need_data()["train_x"]))
    return session.gpu.reopen(run, int(size), session.batch(batches[min(run.at.epoch_step, len(batches) - 1)]))


def lost(session: Any, reason: str) -> Dict[str, Any]:
    """The device failed: the CPU retrains from the last read back, or (``renew``) a new device resumes from the good
    checkpoint, when the worker holds it (streamed: a good one the heap holds is not the worker's)."""
    run, gpu = session.run, session.gpu
    gpu.lost(run.at, run.module, reason)
    renew = gpu.renew and getattr(run.good(), "checkpoint", b"") is None
    return {"device": gpu.refused, "step": run.at.step, "renew": renew, "good": run.last_good()}

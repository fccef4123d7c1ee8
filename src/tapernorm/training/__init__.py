"""Training a run: the loop, what it needs around it, and what is done with a finished run.

loop             train(): the training loop (gate schedule, scale loss, evaluation, checkpoints)
run              a run's set-up: its data, model, optimiser and records, from its config
state            a run directory's state: resume, done, config.json
checkpoint       save and load models and training state (safetensors + JSON)
identity         a run's identity: what must match to resume it
lock             one process per run directory
metrics_log      metrics.jsonl, written so a crash loses nothing
tensorboard_log  the same metrics for TensorBoard, if asked for
distributed      data-parallel training (torchrun)
diagnostics      the pre-logit geometry logged during training (scale, margins)
divergence       a diverged run: how it is recorded and recognised
evaluation       validation loss of a model or a run
fold_run         fold a finished run at g = 0 and verify it (verify.json)
export_run       export a finished run, or taper a Hugging Face model, to transformers
"""

# The GPT-2 fine-tuning family's inputs, params and resources (functions of a job's wildcards),
# for finetune.smk and export.smk. Included when the config has `finetune`.
from tapernorm.machine import job_resources as jr
from tapernorm.workflow import finetune as wft
from tapernorm.workflow.job_functions import heldout_shards

FINETUNE = PLAN.finetune
EVAL_SETS = config["finetune"]["eval"]["sets"]


def finetune_inputs(w):
    inputs = dict(FINETUNE_DATA_FILES, rehearsal=REHEARSAL_INPUTS)
    model = wn.parse_finetune_run(w.ftrun)[1]
    if model in wft.base_models(FINETUNE.section):
        inputs |= model_files(run_dir("finetune_base", model), prefix="base_")
    return inputs


def finetune_eval_inputs(w):
    run = run_dir("finetune", w.ftrun)
    eval_set = wf.eval_set_files(w.evalset)
    inputs = {
        "run": f"{run}/eval.json",
        **model_files(run),
        "data": eval_set["meta"],
        "rows": eval_set["rows"],
    }
    if wn.parse_finetune_run(w.ftrun)[0] == "all_taperln":  # its fold check
        fold = f"results/finetune/fold/{w.ftrun}"
        inputs |= {"verify": f"{fold}/verify.json", "folded": f"{fold}/folded"}
    return inputs


def ft_gpus(wildcards):
    """GPUs of a fine-tuning run (torchrun across them when more than one)."""
    return FINETUNE.gpus(wildcards.ftrun)


def ft_check_gpus(wildcards):
    """GPUs of a fine-tuning run's fold check and evaluation: one at most."""
    return wft.check_gpus(FINETUNE, wildcards.ftrun)


def ft_device(wildcards):
    """The configured device (auto: resolved where the job runs)."""
    return FINETUNE.device


def ft_job(job, key):
    """A resources function: `key` (mem_mb, runtime) of a fold, eval or export job, sized by the
    fine-tuned model's parameter count (jr.model_job_resources): the run's own once it exists
    (Snakemake evaluates resources again when a job's inputs are there), else an estimate.
    """

    def resource(wildcards, input):
        shape = jr.run_shape(input.config)
        model = wn.parse_finetune_run(wildcards.ftrun)[1]
        return jr.model_job_resources(config, model, job, shape)[key]

    return resource


def folded_option(wildcards, input):
    """--folded of an evaluation: the fold check's folded model, when the run has one (a diverged
    run's is empty: `tapernorm eval` then records why instead of reading it)."""
    if "folded" not in input.keys():
        return ""
    return f"--folded {input.folded}"


def prepare_eval_inputs(wildcards):
    """The held-out set is cut from the fine-tuning shards; the others come from the hub (in a
    rehearsal, from its stand-ins)."""
    if wildcards.evalset == "heldout":
        return list(FINETUNE_DATA_FILES.values())
    return REHEARSAL_INPUTS

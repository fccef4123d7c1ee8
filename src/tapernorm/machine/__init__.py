"""What a machine runs and whether it runs it right.

env_lock       the locked environment (requirements/constraints-cpu.txt) against the installed one
gpu_check      the first-GPU check's environment report
gpu_slots      GPUs shared by the jobs of one machine
selftest       `tapernorm selftest`: train, fold and decode on this machine's device
job_resources  what a workflow job asks a scheduler for (memory, GPUs, time)
"""

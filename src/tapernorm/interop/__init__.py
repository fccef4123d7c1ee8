"""Models in and out of Hugging Face transformers.

hub         the hub's offline rules: a clear error saying how to supply a local copy
hf_import   load_hf: a GPT-2 / Llama / Mistral / Qwen2 causal LM as a GPT (optionally tapered)
hf_export   export_hf: a GPT (folded or not) as a transformers model, verified logit for logit
"""

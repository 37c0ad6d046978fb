"""The PyTorch policy backend: one process, CPU or one GPU, any Hugging Face causal LM."""

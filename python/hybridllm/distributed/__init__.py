"""Tensor parallelism on torch.distributed: the process group and the collectives the model
calls (gloo on CPU, NCCL on CUDA)."""

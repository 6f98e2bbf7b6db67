"""FP32 means IEEE FP32 in the peers, as in libnn, whose cuBLAS and cuDNN calls never use
TF32 (cuBLAS COMPUTE_32F, cuDNN FMA math). PyTorch runs FP32 convolutions in TF32 by default
on Ampere and Hopper (torch.backends.cudnn.allow_tf32), which would compare libnn's FP32 with
PyTorch's TF32. The peers call ieee_fp32() before building their models."""
import torch


def ieee_fp32():
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

// The umbrella header: everything research code needs from libnn.
#pragma once
#include <nn/autograd.h>
#include <nn/data.h>
#include <nn/device.h>
#include <nn/dtype.h>
#include <nn/error.h>
#include <nn/init.h>
#include <nn/layers.h>
#include <nn/memory.h>
#include <nn/module.h>
#include <nn/ops.h>
#include <nn/optim.h>
#include <nn/profiler.h>
#include <nn/random.h>
#include <nn/tensor.h>
#include <nn/train.h>

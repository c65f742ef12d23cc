// Umbrella header: everything a host program needs. Includes no CUDA device code.
#pragma once
#include "weft/dtype.h"
#include "weft/error.h"
#include "weft/norm.h"
#include "weft/paged_kv.h"
#include "weft/tensor.h"
#include "weft/token_split.h"
#include "weft/validate.h"
#include "weft/version.h"

// plait: one include for the whole public API.
#pragma once

#include "plait/bootstrap.h"
#include "plait/checkpoint.h"
#include "plait/communicator.h"
#include "plait/compress.h"
#include "plait/compress_auto.h"
#include "plait/compressed_allreduce.h"
#include "plait/error.h"
#include "plait/ps.h"
#include "plait/rdma.h"
#include "plait/store.h"
#include "plait/types.h"
#include "plait/work.h"
